"""The node's toolchain as the probe saw it, for the build to be checked against (node/drift.py).

The build key and the recorded nvcc come from the probe's `compilers`: nvcc's file, the host
compilers' on the login's PATH, the compilers' variables the login set. A build is checked against
them once it ran, in the shell scripts as in the python runner, so that a toolchain replaced
between the probe and the build (red-team round 62) is the node's failure, never a pass under the
probed toolchain's key.
"""

from __future__ import annotations

import shlex
from typing import Any

from orchestrator.run.build_env import BUILD_ENV
from orchestrator.run.probe import HOST_COMPILERS
from orchestrator.run.probe_toolkit import STAT
from orchestrator.run.snapshot import NodeSnapshot


def toolchain_checks(snapshot: NodeSnapshot, shipped: bool) -> dict[str, Any] | None:
    """{"files": [[LABEL, NAME, IDENTITY]], "env": [[NAME, VALUE or None]]} of the probe's lines;
    IDENTITY "" where the probe found no such file (one there now is a change too). SHIPPED: nvcc is
    the farm's own toolchain, checked by its folder's digest. None where the probe said nothing."""
    if not snapshot.compilers:
        return None
    seen: dict[str, str] = {}
    env: dict[str, str] = {}
    tools: list[list[str]] = []  # nvcc's own programs, by the files the probe found (probe_toolkit)
    for line in snapshot.compilers.splitlines():
        words = line.split(" ")
        if words[0] == "env" and len(words) in (2, 3):  # "env NAME HEX"; the hex of "" is cut away
            env[words[1]] = bytes.fromhex(words[2] if len(words) == 3 else "").decode("utf-8", "surrogateescape")
        elif words[0] == "nvcc-tool" and len(words) >= 7:  # "nvcc-tool NAME FILE SIZE MTIME INODE CTIME"
            tools.append([words[1], " ".join(words[2:-4]), " ".join(words[-4:])])
        elif words[0] not in ("nvcc-setup", "cuobjdump-file") and len(words) >= 6:  # "NAME FILE SIZE ..."
            seen["nvcc" if words[0] == "nvcc-file" else words[0]] = " ".join(words[-4:])
    files = [[name, name, seen.get(name, "")] for name in HOST_COMPILERS]
    if not shipped:
        files.append(["nvcc", snapshot.nvcc_path, seen.get("nvcc", "")])
        files += tools
    return {"files": files, "env": [[name, env.get(name)] for name in BUILD_ENV]}


def cuobjdump_seen(snapshot: NodeSnapshot) -> str | None:
    """The identity ("SIZE MTIME INODE CTIME") the probe saw of the node's cuobjdump, "" where it
    found none (one there now is a change too); None where the probe said nothing of its tools."""
    if not snapshot.compilers:
        return None
    for line in snapshot.compilers.splitlines():
        words = line.split(" ")
        if words[0] == "cuobjdump-file" and len(words) >= 6:
            return " ".join(words[-4:])
    return ""


def cuobjdump_check_sh(name: str, seen: str, label: str = "cuobjdump") -> str:
    """Shell saying `@@farm toolchain-changed LABEL` (and setting cw=1) where the file the
    shell runs for NAME is not the one the probe saw (SEEN): one `stat`, no process of the tool."""
    return (
        f'oc=$(command -v {shlex.quote(name)}) && oc=$({STAT} "$oc" 2>/dev/null); '
        f'[ "${{oc:-}}" = {shlex.quote(seen)} ] || {{ echo "@@farm toolchain-changed {label}"; cw=1; }}; '
    )


def _release(version: str | None) -> tuple[int, int] | None:
    parts = (version or "").split(".")
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() else None


def cuobjdump_release(snapshot: NodeSnapshot) -> tuple[int, int] | None:
    """(major, minor) of the node's cuobjdump as the probe's `cuobjdump --version` said it."""
    for line in (snapshot.compilers or "").splitlines():
        if line.startswith("cuobjdump-version "):
            return _release(line.split(" ")[1])
    return None


def older_cuobjdump(snapshot: NodeSnapshot) -> str | None:
    """Why the node's cuobjdump cannot speak for what its nvcc built, or None: a release older
    than nvcc's reads a newer release's cubins (a newer arch, a newer ELF or fatbin) as nothing,
    an error or a part, and names what it decodes its own way (red-team round 70). A newer one
    reads older code, as NVIDIA ships it to; an unknown release is not judged."""
    dump, nvcc = cuobjdump_release(snapshot), _release(snapshot.nvcc_version)
    if dump is None or nvcc is None or dump >= nvcc:
        return None
    return (
        f"the node's cuobjdump is of CUDA {dump[0]}.{dump[1]} (`cuobjdump --version`), older than its nvcc "
        f"of CUDA {nvcc[0]}.{nvcc[1]} (`nvcc --version`) that built the binary: what it says of the binary's "
        "machine code is no verdict on the kernel (configure the node's `cuobjdump:` of nvcc's toolkit)"
    )


def jit_tools(snapshot: NodeSnapshot) -> list[list[str]] | None:
    """[[LABEL, NAME, IDENTITY]] of nvcc and its ptxas as the probe saw them, for the JIT step's
    check (node/drift.jit_changed, jit_shell): the compile of the card's PTX runs them at inspect
    time, after the build's check, and one replaced between (an upgrade landing mid-run) made the
    SASS the farm counted unsaid (red-team round 70). None where the probe said nothing of them."""
    found: list[list[str]] = []
    for line in (snapshot.compilers or "").splitlines():
        words = line.split(" ")
        if words[0] == "nvcc-file" and len(words) >= 6:
            found.insert(0, ["nvcc", snapshot.nvcc_path, " ".join(words[-4:])])
        elif words[0] == "nvcc-tool" and words[1:2] == ["ptxas"] and len(words) >= 7:
            found.append(["ptxas", " ".join(words[2:-4]), " ".join(words[-4:])])
    return found or None


def toolchain_script(checks: dict[str, Any] | None) -> str:
    """Shell, after the build, that says `@@farm toolchain-changed WHAT` and sets bad=1 where the
    toolchain is not the probe's: one `stat` of every file the build's shell finds by its names
    (a file not found is left out, as the probe left it out), the variables by the shell alone."""
    if checks is None:
        return ""
    names = " ".join(shlex.quote(name) for _, name, _ in checks["files"])
    expected = "\n".join(seen for _, _, seen in checks["files"] if seen)
    # each one stat'ed by its own quoted path: one `stat $tc` split a folder's name holding a space
    # ("/opt/gnu tools/bin/gcc") into words, no file, and every build of the node was infra-error
    parts = [
        f'tc=$(for c in {names}; do p=$(command -v "$c") && stat -Lc \'%s %Y %i %Z\' "$p"; done 2>/dev/null); '
        f'[ "$tc" = {shlex.quote(expected)} ] || {{ echo "@@farm toolchain-changed compilers"; bad=1; }}'
    ]
    for name, seen in checks["env"]:
        value = "" if seen is None else "s" + seen
        parts.append(
            f'[ "${{{name}+s}}${{{name}-}}" = {shlex.quote(value)} ] || '
            f'{{ echo "@@farm toolchain-changed env:{name}"; bad=1; }}'
        )
    return "; ".join(parts) + "; "
