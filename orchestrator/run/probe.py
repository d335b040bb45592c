"""Reading what a node really is: every GPU, the driver, nvcc, and whether to believe it.

Expectations are derived from the probed cards, never from farm.yaml's
declaration: a node whose card was swapped is flagged (cc_mismatch), and each
cell is judged against the card it ran on. One round trip does the whole probe:
asked of the node's resident runner (noderunner.probe) where it starts, else
of the shell (probe_command); both print the same sections, read by probe_output.parse_probe,
and tests/test_node_runner.py holds them to the same answers.

Every GPU nvidia-smi lists is a slot of its own, believed only where the driver's
own view confirms it (driver_check.py): a stand-in nvidia-smi, or one that
misreports a card, is never taken for real hardware.
"""

from __future__ import annotations

import base64
import marshal
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.config.inputs import FOLDER_DIGEST_SH
from orchestrator.errors import NodeUnusable, SessionLost
from orchestrator.run.build_env import BUILD_ENV
from orchestrator.run.driver_check import NVML_QUERY, PROBE_QUERY
from orchestrator.run.node import SOURCE
from orchestrator.run.probe_output import parse_probe, read_nvcc_version
from orchestrator.run.probe_toolkit import node_cuobjdump, toolkit_sh
from orchestrator.run.runner_code import squeezed
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.transport import Transport, login_shell
from orchestrator.transport.base import Deadline

if TYPE_CHECKING:
    from orchestrator.run.resident import ResidentRunner

# the node-side runner (noderunner.py says why it is sent, never a file on the node)
RUNNER_SOURCE = SOURCE  # the node runner, as it is shipped (run/node/)
# compressed once, for the shell probe's python3 (base64) and the resident runner's stdin (squeezed)
PACKED = base64.b64encode(squeezed(RUNNER_SOURCE, 9)).decode()
PROBE_TIMEOUT = 60.0
# nvidia-smi, nvcc --version bounded as noderunner.PROBE_TOOL_TIMEOUT: a hung one outlived the 660 s deadline
TOOL_SECONDS, TOOL_GRACE = 50, 5
TOOL = f"timeout -k {TOOL_GRACE} {TOOL_SECONDS}"


def free_inodes_sh(folder: str) -> str:
    """Shell printing the inodes free in FOLDER (a shell word), "-" where its file system
    counts none (btrfs, some network ones)."""
    return f"df -Pi {folder} 2>/dev/null | awk 'NR==2 {{print ($2 > 0 ? $4 : \"-\")}}'"


# the login's soft limits, which every build and kernel inherits (login_limits.py says why they are
# read), as run/node/probe.py's limits() prints them
LIMITS_SH = (
    'awk \'/^Max cpu time/ {print "limit cpu", $4} /^Max file size/ {print "limit fsize", $4} '
    '/^Max address space/ {print "limit as", $4}\' '
    "/proc/self/limits 2>/dev/null"
)
FOLDERS_TIMEOUT = 600.0  # the folders' digests, computed beside the probe
NVCC_IN_TREE = "nvidia/cu13/bin/nvcc"  # where NVIDIA's nvcc wheel puts it (run/toolchain.py)
HOST_COMPILERS = ("gcc", "g++", "cc", "c++", "clang", "clang++", "as", "ld")  # noderunner.HOST_COMPILERS


# The probe's one python3 (probe_python): its own path and whether it can run the
# node runner (@@farm python); the runner compiled by it (@@farm runner: its sys.version, then
# the code object, marshal'd: a cell's python3 then need not compile the runner
# again, a quarter of the node's CPU per cell); then the driver's word unless the
# shell said why not (argv[1]).
def probe_python(runner: bool) -> str:
    """The probe's python3 script; `runner`: it compiles the node runner too."""
    return (
        NVML_QUERY
        # compressed, in base64: the source's repr (quotes, backslashes) grew fourfold in the
        # login-shell-proof encoding (transport/login_shell.py), past Linux's 128 KiB an argument
        + f"RUNNER = {PACKED if runner else None!r}\n"
        + r"""
import sys
print(sys.executable)
print(sys.version_info >= (3, 8))
print("@@farm nvml")
sys.stdout.flush()
try:
    print("error " + sys.argv[1] if sys.argv[1] else "\n".join(query()))
except Exception as err:
    print("error the NVML query failed: %r" % (err,))
sys.stdout.flush()
if RUNNER is not None and sys.version_info >= (3, 8):
    try:
        import binascii, marshal, zlib
        RUNNER = zlib.decompress(binascii.a2b_base64(RUNNER))
        code = marshal.dumps(compile(RUNNER, "farm-runner", "exec")).hex()
        print("@@farm runner")
        print(repr(sys.version))
        print(code)
    except Exception:
        pass  # each cell's python3 compiles the runner itself
"""
    )


def probe_command(node: NodeSpec, folders: Sequence[str] = ()) -> str:
    """The probe's one script. `folders` (absolute, or relative to the work folder)
    get their digests computed too, beside the slow parts, so staging knows what
    the node holds without asking again; `incoming/` is made for what it ships."""
    workdir = node.workdir
    # "~" must expand on the node, so it may not be quoted.
    target = '"$HOME"/' + shlex.quote(workdir[2:]) if workdir.startswith("~/") else shlex.quote(workdir)
    nvcc = shlex.quote(node.nvcc)
    # nvcc --version and the driver query are the slow parts (a compiler's and a
    # python3's start-up): they run side by side, into files printed at the end
    steps = "; ".join(
        [
            'd=$(mktemp -d 2>/dev/null || echo "/tmp/farm-probe-$$"); mkdir -p "$d"',
            # a toolchain the farm installs from PyPI is asked once it is shipped (shipped_nvcc)
            f'{{ {TOOL} {nvcc} --version; echo "rc=$?"; }} > "$d/nvcc" 2>&1 &'
            if not node.pypi_toolchain
            else 'echo "shipped by the farm" > "$d/nvcc"',
            "echo '@@farm workdir'",
            f"mkdir -p {target} && cd {target} && pwd && mkdir -p incoming",
            # what a build and a run need of the node: room in the work folder and the temporary
            # folder (nvcc's and g++'s files), and leave to run a program from the work folder
            "echo '@@farm room'",
            "printf 'work %s %s %s\\n' \"$(df -Pk . 2>/dev/null | awk 'NR==2 {print $4}')\" "
            # a file of this probe's own: probes of one work folder run side by side (toolchains, Slurm)
            "\"$(f=.farm-exec.$$; printf '#!/bin/sh\\n' > $f && chmod +x $f && ./$f && echo 1 || echo 0; "
            f'rm -f $f)" "$({free_inodes_sh(".")})"',
            "printf 'tmp %s 1 %s\\n' \"$(df -Pk \"${TMPDIR:-/tmp}\" 2>/dev/null | awk 'NR==2 {print $4}')\" "
            '"$(' + free_inodes_sh('"${TMPDIR:-/tmp}"') + ')"',
            LIMITS_SH,
            *(
                [
                    "{ "
                    + "; ".join(
                        f"printf '%s %s\\n' {i} \"$(cd {shlex.quote(f)} 2>/dev/null && {FOLDER_DIGEST_SH})\""
                        for i, f in enumerate(folders)
                    )
                    + '; } > "$d/folders" 2>/dev/null &'
                ]
                if folders
                else []
            ),
            "echo '@@farm host'",
            "hostname; uname -sm",
            "echo '@@farm smi'",
            f'{TOOL} nvidia-smi --query-gpu={PROBE_QUERY} --format=csv,noheader 2>&1; smi=$?; echo "rc=$smi"',
            "echo '@@farm driver'",
            # a real GPU has a loaded kernel driver and its control device; an
            # nvidia-smi stand-in on PATH has neither
            "head -n 1 /proc/driver/nvidia/version 2>/dev/null; ls /dev/nvidiactl 2>/dev/null",
            "echo '@@farm procgpus'",
            'for f in /proc/driver/nvidia/gpus/*/information; do [ -r "$f" ] && '
            "grep -E '^(Model|GPU UUID):' \"$f\"; done 2>/dev/null",
            # one python3 for both questions: the cell runner's interpreter (its own path, not a
            # wrapper's: pyenv's shims are shell scripts on PATH) and the driver's word (NVML),
            # asked only where nvidia-smi listed a GPU and the kernel driver's control device
            # is there (no driver without it); a node that needs neither starts no python3
            "{ if [ $smi -ne 0 ]; then why='nvidia-smi lists no GPU'; "
            "elif [ ! -e /dev/nvidiactl ]; then why='no /dev/nvidiactl: the driver was not asked'; "
            "else why=''; fi; "
            + (
                "if "
                if node.runner != "shell"
                else 'if [ -n "$why" ]; then echo \'@@farm nvml\'; echo "error $why"; elif '
            )
            + "command -v python3 >/dev/null 2>&1; then "
            f"python3 -I -S -c {shlex.quote(probe_python(node.runner != 'shell' and node.transport != 'slurm'))} "
            '"$why" 2>&1 | head -n 80; '
            "else echo '@@farm nvml'; echo \"error ${why:-no python3 on the node to query the driver}\"; fi; "
            '} > "$d/python" 2>&1 &',
            "echo '@@farm flock'",
            "command -v flock || true",
            # the host compilers by their files, as noderunner.compilers lists them: part of the build key
            "echo '@@farm compilers'",
            f'for c in {" ".join(HOST_COMPILERS)}; do p=$(command -v "$c") && r=$(readlink -f "$p") && '
            's=$(stat -Lc \'%s %Y %i %Z\' "$r") && echo "$c $r $s"; done 2>/dev/null',
            # the compilers' variables the login sets, as noderunner.compilers lists them: in hex (od)
            f'for v in {" ".join(BUILD_ENV)}; do eval "s=\\${{$v+1}} x=\\${{$v-}}"; [ -n "$s" ] && '
            'printf \'env %s %s\\n\' "$v" "$(printf %s "$x" | od -An -v -tx1 | tr -d \' \\n\')"; done 2>/dev/null',
            *toolkit_sh(node, TOOL),  # nvcc's file, set-up and tools, cuobjdump's file
            "wait",
            'cat "$d/cuobjdump" 2>/dev/null',  # its release (toolkit_sh), the compilers' section's last line
            "echo '@@farm python'",
            'cat "$d/python" 2>/dev/null',
            "echo '@@farm folders'",
            'cat "$d/folders" 2>/dev/null',
            "echo '@@farm nvcc'",
            'cat "$d/nvcc"; rm -rf "$d"',
        ]
    )
    return steps.replace(" &; ", " & ")  # a job sent to the background takes no ";"


def shipped_nvcc(transport: Transport, snapshot: NodeSnapshot, tree: str) -> NodeSnapshot:
    """The snapshot with the nvcc of a toolchain the farm shipped into `tree`."""
    path = f"{tree}/{NVCC_IN_TREE}"
    result = transport.run(f'{shlex.quote(path)} --version 2>&1; echo "rc=$?"', timeout=PROBE_TIMEOUT)
    lines = result.stdout.splitlines()
    return replace(snapshot, nvcc_path=path, nvcc_version=read_nvcc_version(lines), nvcc_output=result.stdout)


def probe_plan(node: NodeSpec, folders: Sequence[str] = (), offered: Mapping[int, dict] | None = None) -> bytes:
    """What the resident runner's probe (noderunner.probe) is asked: the shell
    probe's questions, as a plan (marshal, as a cell's); `offered`: index in
    `folders` -> a small bundle to put there where it is not (noderunner.place_one)."""
    spec = {
        "workdir": node.workdir,
        "nvcc": None if node.pypi_toolchain else node.nvcc,
        "cuobjdump": node_cuobjdump(node),
        "folders": list(folders),
        "place": dict(offered or {}),
        "gpu_query": PROBE_QUERY,
        "nvml": NVML_QUERY,
    }
    return marshal.dumps({"probe": spec, "marker": {}}, 4)


def resident_probe(
    runner: ResidentRunner, node: NodeSpec, folders: Sequence[str] = (), offered: Mapping[int, dict] | None = None
) -> NodeSnapshot:
    """The probe, asked of the node's resident runner as its first request: one
    python3 answers it and then serves the run's cells, where the shell probe
    starts a dozen programs and a python3 of its own before the runner starts.
    SessionLost where the runner did not start (no python3, one older than 3.8):
    the shell probe then says what the node has."""
    timeout = PROBE_TIMEOUT + (FOLDERS_TIMEOUT if folders else 0.0)
    out = bytearray()
    result = runner.run(probe_plan(node, folders, offered), "", Deadline(timeout), out.extend)
    if result.exit_code != 0:
        raise SessionLost(
            f"node {runner.name!r}: the resident runner's probe failed (exit {result.exit_code}: "
            f"{result.stderr.strip()[-300:]})"
        )
    snapshot = parse_probe(runner.name, node, out.decode("utf-8", "replace"), folders, by_runner=True)
    if snapshot.python:
        runner.python = snapshot.python  # a runner started again later is this very python3
    return replace(snapshot, resident=snapshot.python is not None)


def probe(transport: Transport, folders: Sequence[str] = ()) -> NodeSnapshot:
    # hashing what staging needs (CUTLASS, a toolkit) may take longer than the probe itself
    timeout = PROBE_TIMEOUT + (FOLDERS_TIMEOUT if folders else 0.0)
    result = transport.run(probe_command(transport.node, folders), timeout=timeout)
    if "@@farm workdir" not in result.stdout.splitlines():
        raise NodeUnusable(login_shell.refused(transport.name, transport.node, result))
    return parse_probe(transport.name, transport.node, result.stdout, folders)
