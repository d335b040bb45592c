"""Whether a failed build's toolchain can build anything at all: the farm's own one-line program, built
by the node's nvcc (or g++) in the look after the failed stage (stages/base.py `_node_trouble`).

A node whose host compiler is broken (gcc's cc1plus gone, or without its execute bits, which gcc
reports as "No such file or directory" too; g++ missing; a g++ newer than nvcc supports) or whose
nvcc lacks a piece (ptxas, cicc, fatbinary, nvcc.profile, its include folder unreadable) failed every
build on it, and each was stored as the kernel's `build-fail` (red-team round 260). The build log is
the kernel's to write into (a `#warning`, an `#error`, a `#line` file name, the job's own `echo`), so
its words decide nothing here: the farm's own build of its own source, with the node's toolchain and
outside the cell's folders, does. One that fails too is the node's trouble, named by its first error
line; one that builds leaves the kernel's failure its own. The compilers are the ones the build chose, read
from its command's words (`plan`: -ccbin, NVCC_CCBIN, NVCC_*_FLAGS, CXX=; red-team round 273).
"""

from __future__ import annotations

import os
import re
import shlex

from orchestrator.config.shell import ASSIGNMENT, lex, unquoted
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


# a C++ host compiler a build runs or names as its CXX: g++, g++-12, x86_64-linux-gnu-g++-12, c++, clang++-15
_CXX = re.compile(r"^(?:[\w.+-]*-)?(?:g\+\+|c\+\+|clang\+\+)(?:-[\d.]+)?$")
_CXX_VARIABLES = ("CXX", "CUDAHOSTCXX")  # make's and CMake's C++ compiler, as a prefix or make's argument
_NVCC_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")  # read by nvcc as its own arguments
_UNREAD = "\0"  # a value the farm cannot read without running the command (an expansion)


def _words(command: str) -> tuple[list[str], list[str], dict[str, str]] | None:
    """The command's words, as the shell hands them on (_UNREAD for one it expands), in order; the
    programs its simple commands run (an `env`'s too); and the variables its assignments set (`X=v cmd`,
    `X=v;`, `export X=v`, `env X=v cmd`, `make X=v`): a `$X` or `${X}` word takes an earlier assignment's
    value. None where config/shell.py cannot lex it."""
    lexed = lex(command)
    if lexed.problem:
        return None
    words: list[str] = []
    programs: list[str] = []
    variables: dict[str, str] = {}
    for simple in lexed.commands:
        found = simple.program()
        first = found[0] if found else len(simple.words)
        for index, word in enumerate(simple.words):
            text, whole = unquoted(word.text)
            name = re.fullmatch(r"\$(?:\{(\w+)\}|(\w+))", word.text.strip('"'))
            if not whole:
                text = variables.get(next(n for n in name.groups() if n), _UNREAD) if name else _UNREAD
            if ASSIGNMENT.match(word.text):
                key, _, value = word.text.partition("=")
                value, whole = unquoted(value)
                variables[key] = value if whole else _UNREAD
            elif index == first or (index > first and programs and _base(programs[-1]) == "env" and text[:1] != "-"):
                programs.append(text)
                first = index if _base(text) == "env" else len(simple.words)
            words.append(text)
    return words, programs, variables


def _bindir(words: list[str]) -> list[str] | None:
    """nvcc's host compiler option among WORDS, as nvcc arguments ([] none, None one unread)."""
    for i, word in enumerate(words):
        option, eq, value = word.partition("=")
        if option not in ("-ccbin", "--compiler-bindir"):
            continue
        value = value if eq else (words[i + 1] if i + 1 < len(words) else _UNREAD)
        return None if _UNREAD in value or not value else [option, value]
    return []


def plan(command: str, nvcc: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(the compilers the canary tries, as `tools`, and nvcc's arguments naming the host compiler the
    build chose, as `host_compiler`), read from COMMAND's words as config/shell.py lexes them, never run:
    its `-ccbin`/`--compiler-bindir` (either spelling), else NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS' own,
    else NVCC_CCBIN, where the command sets them; and each C++ host compiler it runs or names as CXX
    (red-team round 273: a broken clang++ chosen so was the kernel's build-fail). Where nvcc's host
    compiler is one the farm cannot read (`-ccbin $(which clang++)`), nvcc is not tried: its canary with
    another compiler says nothing of the build's."""
    read = _words(command)
    if read is None:  # not lexed: the patterns round 261 read it with
        return tools(command, nvcc), host_compiler(command)
    words, programs, variables = read
    found = [(label, program) for label, program in tools(command, nvcc) if label == "nvcc"]
    args = _bindir(words)
    for flags in _NVCC_FLAGS:
        if args == [] and flags in variables:
            inner = variables[flags]
            args = None if _UNREAD in inner else _bindir(shlex.split(inner) if _safe_split(inner) else [_UNREAD])
    if args == [] and "NVCC_CCBIN" in variables:
        value = variables["NVCC_CCBIN"]
        args = ["-ccbin", value] if _UNREAD not in value and value else None
    if args is None:
        found = []
    cxx = [p for p in programs if _CXX.match(_base(p))]
    cxx += [variables[v] for v in _CXX_VARIABLES if v in variables and _UNREAD not in variables[v]]
    for program in cxx:
        label = re.sub(r"[^\w+.-]", "_", _base(program)) or "c++"
        if program and all(p != program for _, p in found):
            found.append((label, program))
    return found, args or []


def _base(program: str) -> str:
    return os.path.basename(program)


def _safe_split(text: str) -> bool:
    try:
        shlex.split(text)
    except ValueError:
        return False
    return True


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
