"""The libraries a build's linker found on its own, for `.farm-read` (build_reads.py), in the shell
scripts as node/linked.py does it for the python runners (its docstring says why: red-team round 69).

The farm says what to look for (each `-l`'s file names, the command's `-L` folders, the host
compilers to ask, nvcc's toolkit folders); the node looks, in its own LIBRARY_PATH, compilers' and
ld's folders, so that both runners list the same files for the same build.
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from orchestrator.run.commands import KILL_GRACE
from orchestrator.run.node.linked import ASK_TIMEOUT, LINKER_DIRS
from orchestrator.run.probe import HOST_COMPILERS
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.run.stages.build_reads import command_words

# nvcc's options that begin as `-l` does and name no library (`-ldir` is --libdevice-directory,
# `-lto` --lto, `-lib` --lib): read as libraries they were found nowhere, the build never reused
_NOT_LIBRARIES = frozenset({"-lineinfo", "-ldir", "-lto", "-ltoir", "-lib", "-link"})


def library_search(command: str, snapshot: NodeSnapshot) -> dict[str, Any] | None:
    """{"libs": [[FILE, ...] per -l], "dirs", "compilers", "tops"} for node/linked.py, or None
    where the command links no library by name."""
    words = command_words(command)
    dirs: list[str] = []
    names: list[str] = []
    for at, word in enumerate(words):
        following = words[at + 1] if at + 1 < len(words) else ""
        for short, long, into in (("-L", "--library-path", dirs), ("-l", "--library", names)):
            if word in (short, long):
                into.append(following)
            elif word.startswith(long + "="):
                into.append(word[len(long) + 1 :])
            elif word.startswith(short) and not word.startswith("--") and word.split("=")[0] not in _NOT_LIBRARIES:
                into.append(word[len(short) :])
    # nvcc takes a list in one value (`-lcublas,cublasLt`, `-L/opt/a,/opt/b`): a folder read as
    # "/opt/a,/opt/b" was looked in by nobody, and a library found in /usr/lib listed, not the
    # /opt/b one the linker took (a review finding); gcc hands ld the value whole
    if words and (words[0] in ("{nvcc}", snapshot.nvcc_path) or posixpath.basename(words[0]) == "nvcc"):
        dirs = [piece for value in dirs for piece in value.split(",")]
        names = [piece for value in names for piece in value.split(",")]
    libs = [[n[1:]] if n.startswith(":") else [f"lib{n}.so", f"lib{n}.a"] for n in names if n not in ("", ":")]
    if not libs:
        return None
    # nvcc's own -L folders sit under its toolkit: where the probe found ptxas (nvcc's _HERE_; nvcc
    # itself may be a wrapper elsewhere), and above an nvcc the command names by its path
    programs = [w for w in words if w.startswith("/") and w.endswith("/nvcc")]
    for line in (snapshot.compilers or "").splitlines():
        got = line.split(" ")
        if got[0] == "nvcc-tool" and got[1:2] == ["ptxas"] and len(got) >= 7:
            programs.append(" ".join(got[2:-4]))
    tops = sorted({posixpath.dirname(posixpath.dirname(p)) for p in programs})
    compilers = [c for c in HOST_COMPILERS if c not in ("as", "ld")]
    return {"libs": libs, "dirs": dirs, "compilers": compilers, "tops": tops}


# each of the folders in $ld_ holding the file $1, as node/linked.py's _in_dirs
_LOOK = (
    'lk_() { printf \'%s\\n\' "$ld_" | while IFS= read -r d; do [ ! -f "$d/$1" ] || printf \'%s\\n\' "$d/$1"; done; }; '
)


def linked_sh(search: dict[str, Any] | None, named: list[str]) -> str:
    """Shell, run in the build folder, setting $lf to the files the linker may have read for
    SEARCH's libraries and those the linker scripts among them and among NAMED name, one a line;
    its status 1 where a library is in none of the folders (the build is then not reused)."""
    q = shlex.quote
    scripts = " ".join(q(n) for n in named if n.endswith((".a", ".so")) or ".so." in n)
    shell = f"lu_=''; lf=''; ld_=''; {_LOOK}"
    if search:
        fixed = " ".join(q(d) for d in search["dirs"])
        tops = " ".join(q(t) for t in search["tops"])
        # each compiler's and ld's word bounded, as node/linked.py bounds them all (ASK_TIMEOUT):
        # a wrapper that hangs held the build stage past its budget
        ask = f"timeout -k {KILL_GRACE} {ASK_TIMEOUT // 4}"
        shell += (
            f"ld_=$({{ printf '%s\\n' {fixed} ''; printf '%s\\n' \"$LIBRARY_PATH\" | tr ':' '\\n'; "
            f"for c in {' '.join(q(c) for c in search['compilers'])}; do "
            f'command -v "$c" >/dev/null 2>&1 && {ask} "$c" -print-search-dirs 2>/dev/null '
            "| sed -n 's/^libraries: =//p' | tr ':' '\\n'; done; "
            f"{ask} ld --verbose 2>/dev/null | tr ';' '\\n' "
            "| sed -n 's/^[[:space:]]*SEARCH_DIR(\"=\\{0,1\\}\\(.*\\)\")$/\\1/p'; "
            f'for t in {tops} ""; do [ -n "$t" ] || continue; for l in "$t/lib64" "$t/lib" "$t"/targets/*/lib; do '
            'printf \'%s\\n\' "$l" "$l/stubs"; done; done; '
            f"printf '%s\\n' {' '.join(LINKER_DIRS)}; }} | grep -v '^$' | while IFS= read -r d; do "
            "case $d in /*) ;; *) d=$PWD/$d ;; esac; printf '%s\\n' \"$d\"; done "
            # each folder once, by its path as python's normpath says it (`lib/../lib/` is `lib`)
            "| sed -e 's#//*#/#g' -e 's#/\\./#/#g' -e ':a' -e 's#/[^/.][^/]*/\\.\\./#/#' -e 'ta' "
            "-e 's#/\\.\\{0,1\\}$##' | awk '!seen[$0]++'); "
        )
        for files in search["libs"]:
            look = "; ".join(f"lk_ {q(f)}" for f in files)
            shell += f'g_=$({look}); [ -n "$g_" ] || lu_=1; lf=$(printf "%s\\n" "$lf" "$g_"); '
    if search or scripts:  # the files the linker scripts among them name (node/linked.py's _script_files)
        shell += (
            f'ls_=$(printf \'%s\\n\' {scripts} "$lf" | while IFS= read -r f; do [ -f "$f" ] || continue; '
            "case $(head -c 4 \"$f\" | tr -d '\\000\\177') in '!<ar'|ELF) continue ;; esac; "
            '[ "$(wc -c < "$f")" -le 65536 ] || continue; s_=${f%/*}; '
            "tr '(),\\t ' '\\n\\n\\n\\n\\n' < \"$f\" | while IFS= read -r w; do case $w in "
            "'/*'*) ;; /*) [ ! -f \"$w\" ] || printf '%s\\n' \"$w\" ;; "
            '-l?*) lk_ "lib${w#-l}.so"; lk_ "lib${w#-l}.a" ;; '
            '*.a|*.so|*.so.[0-9]*) [ ! -f "$s_/$w" ] || printf \'%s\\n\' "$s_/$w"; lk_ "$w" ;; '
            'esac; done; done); lf=$(printf "%s\\n" "$lf" "$ls_"); '
        )
    return shell + '[ -z "$lu_" ]'
