"""Whether a failed build was refused a file of the node's own, asked after it fails (stages/base.py
`_node_trouble`, the look after a failed stage, in the same round trip).

Landlock (node/confine.py) handles no chmod. Where the node's login user owns its toolkit (a CUDA
toolkit in its home folder, a conda nvcc, a gcc of its own), a kernel can take the bits of a header
every build reads (`chmod 000 cuda_runtime.h`) or of a program nvcc runs (`chmod a-x ptxas`): headers
are in no identity check, and the next run's probe leaves an unexecutable ptxas out, so every later
build of the node failed "Permission denied", stored as each innocent job's build-fail (red-team
round 244). The files the build log says were denied, outside the cell's own folders, are asked of
the node: one the login owns but can no longer read (or run, or enter) had its bits taken since, the
node's trouble. One the login does not own (root's, unreadable by design) is no sign of that, and a
file in the cell's own build or run folder is the job's: both stay the job's build-fail.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable

MARK = "@@farm-denied"  # MARK HOW MODE PATH: a file of the login's own it cannot HOW ("read", "run", "enter")
MAX_PATHS = 12  # files asked of one log: a log of a thousand denials costs the look no more
# a line of the build log saying a file was refused (EACCES), and the part of it before the words
_DENIED = re.compile(r"^(.*?):?\s*Permission denied\b", re.M)
# the refused file was to be run: exec's words, or a shell's naming the program alone (`sh: 1: ptxas:
# Permission denied`; its `sh: 1: cannot create X: Permission denied` is a write, refused by Landlock)
_RUN = re.compile(r"\bexec|cannot execute|^(?:\S*/)?(?:sh|bash|dash): (?:\d+: |line \d+: )?[^\s:]+$")
_QUOTED = re.compile(r"['\"`‘’]([^'\"`‘’]+)['\"`‘’]")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")


def _names(text: str) -> list[tuple[str, bool]]:
    """(name, to be run) of each file the log's "Permission denied" lines name: the words before
    them after their last `: `, its last word, and what those lines quote."""
    found: list[tuple[str, bool]] = []
    for match in _DENIED.finditer(text):
        before = match.group(1).strip()
        run = bool(_RUN.search(before))
        before = re.sub(r":?\s*execvp$", "", before)
        last = before.rsplit(": ", 1)[-1].strip().strip("'\"`‘’")
        words = last.split()
        for name in [*_QUOTED.findall(before), last, words[-1] if words else ""]:
            if name and not _UNSAFE.search(name) and len(name) < 4096:
                found.append((name, run))
    return found


def _inside(path: str, folders: Iterable[str]) -> bool:
    norm = posixpath.normpath(path)
    return any(norm == f or norm.startswith(f.rstrip("/") + "/") for f in map(posixpath.normpath, folders))


def candidates(log: bytes, cwd: str, own: Iterable[str], tool_dirs: Iterable[str]) -> list[tuple[str, bool]]:
    """(absolute path, to be run) of the files a failed build's LOG says were denied, to ask of the
    node: a relative name is the build's folder's (CWD, where its compiler ran), a bare one (a shell's
    `ptxas`) also each of TOOL_DIRS' (nvcc's folders, as the probe found them); none in OWN (the cell's
    own folders: its files are the job's)."""
    own, dirs = list(own), list(dict.fromkeys(tool_dirs))
    paths: dict[str, bool] = {}
    for name, run in _names(log.decode("utf-8", "replace")):
        if name.startswith("/"):
            found = [name]
        elif "/" in name:
            found = [posixpath.join(cwd, name)]
        elif not re.search(r"\s", name):  # a bare name: the compiler's folder's, or a tool's
            found = [posixpath.join(d, name) for d in [cwd, *dirs]]
        else:
            continue
        for path in found:
            if not _inside(path, own):
                paths[path] = paths.get(path, False) or run
    return list(paths.items())[:MAX_PATHS]


# shell functions: `farm_dn run|read PREFIX... PATH` says the first folder on the way (from `/` down)
# the login owns but cannot enter, or PATH itself where the login owns it and cannot read (run, enter) it
_FUNCTIONS = (
    # the path said as the node resolves it (`bin/../include` is nvcc's way of naming its headers)
    f'farm_ds() {{ farm_f=$(readlink -f "$2" 2>/dev/null); echo "{MARK} $1 $(stat -Lc %a "$2" 2>/dev/null) '
    '${farm_f:-$2}"; }; '
    'farm_dn() { farm_r=$1; shift; while [ $# -gt 1 ]; do [ -d "$1" ] || return 0; '
    '[ ! -O "$1" ] || [ -x "$1" ] || { farm_ds enter "$1"; return 0; }; shift; done; '
    '[ -e "$1" ] && [ -O "$1" ] || return 0; '
    'if [ -d "$1" ]; then [ -r "$1" ] && [ -x "$1" ] || farm_ds enter "$1"; '
    'elif [ ! -r "$1" ]; then farm_ds read "$1"; '
    'elif [ "$farm_r" = run ] && [ ! -x "$1" ]; then farm_ds run "$1"; fi; }; '
)


def denied_sh(paths: list[tuple[str, bool]]) -> str:
    """Shell printing `MARK HOW MODE PATH` for the first folder on each path (from `/` down) or the
    file itself that the login owns but cannot enter, read or (to be run) run; nothing where each is
    sound, gone, or not the login's. `test`s alone, and a `stat` for what it says."""
    if not paths:
        return ""
    calls = "; ".join(
        "farm_dn " + ("run " if run else "read ") + " ".join(shlex.quote(p) for p in _prefixes(path))
        for path, run in paths
    )
    return _FUNCTIONS + calls


def _prefixes(path: str) -> list[str]:
    """/a, /a/b, /a/b/c of /a/b/c (no `.` or `..` folded: a link on the way is the node's to follow)."""
    pieces = [p for p in path.split("/") if p]
    return ["/" + "/".join(pieces[: n + 1]) for n in range(len(pieces))]


def tool_dirs(compilers: str | None, nvcc: str | None) -> list[str]:
    """The folders of nvcc and the programs it runs, as the probe found them (probe_toolkit's
    `nvcc-file` and `nvcc-tool` lines: ptxas's and cicc's), where a shell's words name a bare one."""
    found = [posixpath.dirname(nvcc)] if nvcc and nvcc.startswith("/") else []
    for line in (compilers or "").splitlines():
        words = line.split(" ")
        if words[0] == "nvcc-file" and len(words) >= 6:
            found.append(posixpath.dirname(" ".join(words[1:-4])))
        elif words[0] == "nvcc-tool" and len(words) >= 7:
            found.append(posixpath.dirname(" ".join(words[2:-4])))
    return [d for d in dict.fromkeys(found) if d.startswith("/")]


def denied(lines: Iterable[str]) -> str:
    """Why the look found a file of the login's own denied to it (the node's trouble), else ""."""
    for line in lines:
        if line.startswith(MARK + " "):
            how, mode, path = [*line[len(MARK) + 1 :].split(" ", 2), "", ""][:3]
            what = {"read": "read", "run": "run", "enter": "entered"}.get(how, "read")
            bits = mode[:8].zfill(3) if mode.isdigit() else "unknown"
            return (
                f"the node's file {path[:300]} could no longer be {what} by the node's user, who owns it "
                f"(mode {bits}): a program of that user took its bits since (a kernel of the run may: Landlock "
                "handles no chmod), and the farm cannot tell whose; every build that reads it fails until its "
                "mode is set back"
            )
    return ""
