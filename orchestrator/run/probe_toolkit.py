"""The shell probe's lines of the node's CUDA tools by their files (run/node/probe.py's twins):
nvcc's, the programs nvcc runs from its own folders, and cuobjdump's.

A tool replaced in place under the same `nvcc --version` (ptxas of another release, a site's
wrapper rewritten, a cuobjdump swapped) made or read another binary unseen (red-team rounds 62
and 67): each one's file (size, modification time, inode, change time) is recorded here, stat
only, and nvcc's tools are in the build key and checked after each build (stages/build_tools.py),
cuobjdump around each inspect (stages/inspect.py).
"""

from __future__ import annotations

import shlex

from orchestrator.config.farm_spec import NodeSpec

NVCC_SETUP = ("-dryrun", "-x", "cu", "-E", "/dev/null")  # noderunner.NVCC_SETUP: nvcc's set-up, keyed
# noderunner.NVCC_TOOLS: each program nvcc runs, and the dry run's variable that names its folder
NVCC_TOOLS = (
    ("ptxas", "_HERE_"), ("fatbinary", "_HERE_"), ("nvlink", "_HERE_"), ("cudafe++", "_HERE_"), ("cicc", "CICC_PATH"),
)  # fmt: skip
STAT = "stat -Lc '%s %Y %i %Z'"  # a file's identity, as the probes and the checks print it


def node_cuobjdump(node: NodeSpec) -> str | None:
    """The cuobjdump the node's cells are inspected with, where it is the node's (node_work's
    choice): a shipped toolkit's is checked by its folder's digest instead."""
    return node.cuobjdump or (None if node.pypi_toolchain else "cuobjdump")


def _file_sh(name: str, label: str) -> str:
    """Shell printing `LABEL FILE SIZE MTIME INODE CTIME` of the file the shell runs for NAME."""
    return f'p=$(command -v {shlex.quote(name)}) && r=$(readlink -f "$p") && s=$({STAT} "$r") && echo "{label} $r $s"'


def toolkit_sh(node: NodeSpec, tool: str) -> list[str]:
    """The probe's steps for the node's nvcc (none for a shipped one: its tree is checked by
    content) and cuobjdump; TOOL: the probe's `timeout` prefix."""
    steps = []
    cuobjdump = node_cuobjdump(node)
    if cuobjdump:
        # its release too, once per node (no process per cell): one older than nvcc reads nvcc's
        # cubins as nothing, an error or a part (red-team round 70), as noderunner's cuobjdump_version
        release = r"s/.*[[:space:],]V\([0-9][0-9]*[.][0-9][0-9]*[.][0-9][0-9]*\).*/\1/p"
        # in the background, beside nvcc's dry run, into the probe's "$d/cuobjdump" (its file line
        # too), printed after the probe's `wait` (probe.py): the compilers' section's last lines, as
        # the resident probe prints them, and a hung cuobjdump costs the probe no more time
        steps.append(
            "{ "
            + _file_sh(cuobjdump, "cuobjdump-file")
            + f' && {{ v=$({tool} "$r" --version 2>&1)'
            + f" && v=$(printf '%s\\n' \"$v\" | sed -n {shlex.quote(release)} | head -n 1)"
            + ' && [ -n "$v" ] && echo "cuobjdump-version $v"; }; } > "$d/cuobjdump" 2>/dev/null &'
        )
    if not node.pypi_toolchain:
        nvcc = shlex.quote(node.nvcc)
        folder = {var: f"$(printf '%s\\n' \"$o\" | sed -n 's/^#\\$ {var}=//p' | head -n 1)" for _, var in NVCC_TOOLS}
        files = " ".join(f'"${{{var.strip("_").lower()}}}/{name}"' for name, var in NVCC_TOOLS)
        steps += [
            # nvcc's file (checked after each build: node/drift.py) and set-up, as noderunner.probe says
            _file_sh(node.nvcc, "nvcc-file"),
            f"o=$({tool} {nvcc} {' '.join(NVCC_SETUP)} 2>&1) && "
            "{ printf 'nvcc-setup %s\\n' \"$(printf '%s\\n' \"$o\" | sha256sum | cut -c1-64)\"; "
            + "; ".join(f"{var.strip('_').lower()}={cmd}" for var, cmd in folder.items())
            + f"; for t in {files}; do "
            f'[ -f "$t" ] && [ -x "$t" ] && r=$(readlink -f "$t") && s=$({STAT} "$r") && '
            'echo "nvcc-tool ${t##*/} $r $s"; done; }',
        ]
    return steps
