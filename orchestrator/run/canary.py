"""Whether a failed build's toolchain can build anything at all: the farm's own one-line program, built
by the node's nvcc (or g++) in the look after the failed stage (stages/base.py `_node_trouble`).

A node whose host compiler is broken (gcc's cc1plus gone, or without its execute bits, which gcc
reports as "No such file or directory" too; g++ missing; a g++ newer than nvcc supports) or whose
nvcc lacks a piece (ptxas, cicc, fatbinary, nvcc.profile, its include folder unreadable) failed every
build on it, and each was stored as the kernel's `build-fail` (red-team round 260). The build log is
the kernel's to write into (a `#warning`, an `#error`, a `#line` file name, the job's own `echo`), so
its words decide nothing here: the farm's own build of its own source, with the node's toolchain and
outside the cell's folders, does. One that fails too is the node's trouble, named by its first error
line; one that builds leaves the kernel's failure its own.
"""

from __future__ import annotations

import re
import shlex

from orchestrator.run.stages.failure_words import first_error

MARK = "@@farm-canary"  # MARK TOOL RC, then MARK-said TOOL LINE: the canary's status and its first error
SECONDS = 120  # one canary build's limit: a hung ptxas or cicc is said as such, not waited on
# the farm's own program: cuda_runtime.h (pre-included by nvcc) brings the host's C++ headers, a
# __global__ function makes nvcc run cicc, ptxas and fatbinary, the link runs nvlink and ld
_CU = '#include <cstdio>\n__global__ void farm_canary(int *p) { *p = 1; }\nint main() { std::printf("ok\\n"); }\n'
_CPP = '#include <cstdio>\n#include <cmath>\nint main() { std::printf("%f\\n", std::sqrt(2.0)); }\n'
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")


def tools(command: str, nvcc: str) -> list[tuple[str, str]]:
    """(label, program) of the compilers the failed build's COMMAND runs that the canary tries: the
    node's nvcc where the command names it, g++ where it names that; none where it names neither (a
    `make`: what it runs is not the farm's to guess)."""
    found: list[tuple[str, str]] = []
    if shlex.quote(nvcc) in command or re.search(r"(?:^|[\s/;&|(])nvcc(?:\s|$)", command):
        found.append(("nvcc", nvcc))
    if re.search(r"(?:^|[\s/;&|(])g\+\+(?:\s|$)", command):
        found.append(("g++", "g++"))
    return found


# nvcc's host compiler as the build named it: a node whose default g++ is newer than nvcc takes,
# built with `-ccbin g++-12` by its jobs, is sound; the canary built with the default one blamed the
# node for a kernel's own compile error
_CCBIN = re.compile(r"(?:^|\s)(-ccbin|--compiler-bindir)(?:=|\s+)('[^']*'|\"[^\"]*\"|[^\s;&|]+)")


def host_compiler(command: str) -> list[str]:
    """The failed build's `-ccbin X` (or `--compiler-bindir X`) as nvcc arguments, [] where it names none."""
    found = _CCBIN.search(command)
    if found is None:
        return []
    try:
        words = shlex.split(found.group(2))
    except ValueError:
        return []
    return [found.group(1), words[0]] if len(words) == 1 else []


def canary_sh(compilers: list[tuple[str, str]], workdir: str, nvcc_args: list[str] | None = None) -> str:
    """Shell building the farm's own program with each of COMPILERS in a folder of its own under
    WORKDIR (removed after), printing `MARK LABEL RC` and, where it failed, `MARK-said LABEL LINE`
    for each of the build's log lines (at most 40); nothing where the folder cannot be made (the
    look's room and folder checks say why)."""
    if not compilers:
        return ""
    q = shlex.quote
    steps = [
        f"farm_cd=$(mktemp -d {q(workdir.rstrip('/') + '/.farm-canary.XXXXXX')} 2>/dev/null) && "
        f"printf '%s' {q(_CU)} > \"$farm_cd/c.cu\" && printf '%s' {q(_CPP)} > \"$farm_cd/c.cpp\" && {{ "
    ]
    for label, program in compilers:
        source = "c.cu" if label == "nvcc" else "c.cpp"
        args = "".join(f"{q(a)} " for a in (nvcc_args or [])) if label == "nvcc" else ""
        steps.append(
            f'( cd "$farm_cd" && TMPDIR="$farm_cd" && export TMPDIR && timeout -k 5 {SECONDS} {q(program)} {args}'
            f'-o "$farm_cd/out" {source} > "$farm_cd/log" 2>&1 < /dev/null ); farm_cr=$?; '
            f"echo {q(f'{MARK} {label}')} $farm_cr; [ $farm_cr -eq 0 ] || "
            f'head -n 40 "$farm_cd/log" | sed {q(f"s/^/{MARK}-said {label} /")}; '
        )
    steps.append('}; [ -z "${farm_cd:-}" ] || rm -rf "$farm_cd"')
    return "".join(steps)


def broken(lines: list[str]) -> str:
    """Why the look's canary lines say the node's toolchain cannot build the farm's own program, else ""."""
    said: dict[str, list[str]] = {}
    for line in lines:
        if line.startswith(f"{MARK}-said "):
            label, _, text = line[len(MARK) + 6 :].partition(" ")
            said.setdefault(label, []).append(_UNSAFE.sub("?", text))
    for line in lines:
        words = line.split(" ")
        if words[0] != MARK or len(words) != 3 or not words[2].isdigit() or words[2] == "0":
            continue
        label, rc = words[1], int(words[2])
        log = said.get(label, [])
        error = first_error("\n".join(log).encode()) or (f': "{log[-1][:300]}"' if log else " and said nothing")
        how = f"was killed at the canary's {SECONDS} s limit" if rc in (124, 137) else f"exited {rc}"
        return (
            f"the node's {label} cannot build even the farm's own one-line program (it {how}{error}): the "
            "node's toolchain (its host compiler, or a piece of nvcc's) is broken, whatever the kernel is"
        )
    return ""
