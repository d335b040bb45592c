"""The shell scripts' list of the files a build's compiler read, as node/built.py's for the python3
runners (the same `.farm-read`, in sha256sum's format, so either runner checks the other's cache).

The build key names the job's files, the command, nvcc and the host compilers, not a header the
build read from elsewhere on the node (`-I /opt/lib/include`, `/usr/include`): one changed there
rebuilt nothing, and the binary made from the old one passed (red-team round 61). gcc's
SUNPRO_DEPENDENCIES (nvcc's preprocessing is gcc's) lists every file the compiler read; the
linker's are not in it, so the files the command names by an absolute path and the libraries its
`-l` finds in its `-L` folders are added (a static library rebuilt on the node was reused unsaid).
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from collections.abc import Sequence

READ_LIST = ".farm-read"
READ_DEPS = ".farm-read.d"
_ERE_SPECIAL = frozenset(".[]()*+?{}|^$\\")  # what a POSIX ERE reads as other than itself
NO_LIST = "(no list of the files it read)"
# text shlex splits at white space alone (no quote, backslash, or white space str.split would
# split at and shlex not): most build commands, which shlex's per-character loop read at ~0.8 ms
_PLAIN = re.compile(r"[^'\"\\\x0b\x0c\x1c-\x1f]*")


def reads_env(bdir: str) -> str:
    """An assignment for the build's environment (before its command), or "" where the folder's
    path holds white space: gcc would take what follows a space for the rule's target and write
    elsewhere, refused by the build's confinement (a build failed for the farm's sake)."""
    path = f"{bdir}/{READ_DEPS}"
    return "" if re.search(r"\s", path) else f"SUNPRO_DEPENDENCIES={shlex.quote(path)} "


def command_words(command: str) -> list[str]:
    """A build command's words, and the pieces of those that hand the linker several."""
    return list(_command_words(command))


@functools.lru_cache(maxsize=64)  # a cell's command, read for its read list and its libraries
def _command_words(command: str) -> tuple[str, ...]:
    if command.isascii() and _PLAIN.fullmatch(command):
        words = command.split()
    else:
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
    # what gcc's -Wl, and nvcc's -Xlinker= hand the linker, comma-separated: its own words
    for prefix in ("-Wl,", "-Xlinker=", "--linker-options=", "-Xlinker,"):
        words += [piece for w in words if w.startswith(prefix) for piece in w[len(prefix) :].split(",")]
    return tuple(words)


def named_files(command: str) -> list[str]:
    """The files a build command may read that no compiler lists: each word (or option's value,
    or piece of one for the linker) that is an absolute path, and `DIR/libNAME.a` and `.so` for
    each `-L DIR` and `-l NAME`. Folders among them are dropped on the node, where what is a file
    is known."""
    words = command_words(command)
    paths, dirs, libs = [], [], []
    for at, word in enumerate(words):
        following = words[at + 1] if at + 1 < len(words) else ""
        for option, into in (("-L", dirs), ("-l", libs)):
            if word == option:
                into.append(following)
            elif word.startswith(option):
                into.append(word[len(option) :])
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if value.startswith("/"):
            paths.append(value)
    for name in libs:
        files = [name[1:]] if name.startswith(":") else [f"lib{name}.a", f"lib{name}.so"]
        paths += [posixpath.join(d, f) for d in dirs if d.startswith("/") for f in files]
    return sorted(set(paths))


def stale_check(bdir: str) -> str:
    """Shell run in a cached build's folder's parent setting $stale to the first file the build
    read that hashes to something else now (sha256sum -c's `NAME: FAILED`), or NO_LIST."""
    q = shlex.quote
    return (
        f"stale=$(cd {q(bdir)} 2>/dev/null && if [ -f {READ_LIST} ]; then "
        # its words in C's locale: a translated `OK` made every cached build stale (a review's note)
        f"LC_ALL=C sha256sum -c {READ_LIST} 2>/dev/null | grep -v ': OK$' | head -n 1; "
        f"else echo {q(NO_LIST + ': ')}; fi); "
    )


def write_list(skip: Sequence[str], named: Sequence[str], linked: str = "") -> str:
    """Shell run in the build folder after a build that succeeded: `.farm-read` from gcc's rules
    (its words, less the targets and the folders in SKIP, which the farm verifies by digest or
    the build made) and the NAMED files, those that are files now (a temporary file of the
    build's is gone), status 1 where one cannot be hashed (then the build is not reused). LINKED:
    shell setting $lf to the libraries its linker found on its own (build_links.py), status 1
    where one is found nowhere (then neither)."""
    ere = "|".join("".join("\\" + c if c in _ERE_SPECIAL else c for c in f"{s.rstrip('/')}/") for s in skip)
    keep = f"grep -v -E {shlex.quote(f'^({ere})')}" if skip else "cat"
    listed = " ".join(shlex.quote(n) for n in named)
    names = f"printf '%s\\n' {listed}; " if named else ""
    names += "printf '%s\\n' \"$lf\"; " if linked else ""
    return (
        f"rm -f {READ_LIST} && "  # not written through a link the build left by that name
        f"{linked + ' && ' if linked else ''}"
        f"{{ {{ {names}[ ! -f {READ_DEPS} ] || tr ' \\\\' '\\n\\n' < {READ_DEPS}; }} "
        f"| grep -v -e ':$' -e '^$' | {keep} "
        '| LC_ALL=C sort -u | while IFS= read -r f; do [ ! -f "$f" ] || printf \'%s\\0\' "$f"; done '
        f"| xargs -0 -r sha256sum --; }} > {READ_LIST}"
    )
