"""The libraries a build's linker found on its own, for the build's list of what it read (built.py).

The build command's `-l NAME` names no file: the linker looks for `libNAME.so` and `libNAME.a` in
the command's `-L` folders, then LIBRARY_PATH, the host compiler's folders, its own built-in ones
(/usr/lib/x86_64-linux-gnu, /usr/local/lib) and nvcc's lib folder; `-l:FILE` names the file in
those folders; and a library may be a linker script naming others (`INPUT(/opt/lib/libfoo.a)`, as
glibc's libc.so is). Before red-team round 69 only the `-L` folders were looked in, and a static
library found elsewhere, rebuilt on the node, left the cached binary with its old code reused and
passed. So each name is looked for here in all of those folders, every match listed (the one the
linker took is among them), and each linker script's files with it; a name found in none of them
was found where the farm cannot tell, and the build is then not reused. The shell scripts do the
same: stages/build_links.py.
"""

import glob
import os
import re
import subprocess
import time

# ld's own folders where it cannot say them (`ld --verbose` names them on GNU ld)
LINKER_DIRS = (
    "/usr/local/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib64",
    "/lib64", "/usr/lib64", "/usr/local/lib", "/lib", "/usr/lib",
)  # fmt: skip
# all compilers' and ld's words on their folders together (each answers in milliseconds): the build
# stage's budget holds no more after the build's own limit (a review finding: 7 asks of 30 s each,
# unbounded in shell, outran it); one that says nothing in time leaves its folders unlooked in, so
# a library only there is found nowhere and the build is not reused
ASK_TIMEOUT = 20
SCRIPT_MAX = 65536  # a linker script is a few lines; larger text is not read as one
LIBRARY_NAME = re.compile(r"\.(a|so|so\.[0-9.]+)$")  # a file the linker takes as a library (or its script)


def _asked(argv, env, deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        return ""
    try:
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=left)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.decode("utf-8", "surrogateescape")


def linker_dirs(search, env, cwd):
    """The folders the build's linker may have looked in, in the build's ENV (CWD its folder)."""
    dirs = list(search["dirs"]) + env.get("LIBRARY_PATH", "").split(":")
    deadline = time.monotonic() + ASK_TIMEOUT
    for name in search["compilers"]:
        for line in _asked([name, "-print-search-dirs"], env, deadline).splitlines():
            if line.startswith("libraries: ="):
                dirs += line[len("libraries: =") :].split(":")
    dirs += re.findall(r'SEARCH_DIR\("=?([^"]*)"\)', _asked(["ld", "--verbose"], env, deadline))
    for top in search["tops"]:  # nvcc's own -L folders (its nvcc.profile's LIBRARIES)
        for lib in [top + "/lib64", top + "/lib", *sorted(glob.glob(glob.escape(top) + "/targets/*/lib"))]:
            dirs += [lib, lib + "/stubs"]
    found = []
    for folder in [*dirs, *LINKER_DIRS]:
        path = os.path.normpath(os.path.join(cwd, folder)) if folder else ""
        if path and path not in found:
            found.append(path)
    return found


def _in_dirs(name, dirs):
    return [os.path.join(d, name) for d in dirs if os.path.isfile(os.path.join(d, name))]


def _script_files(path, dirs):
    """The files a linker script at PATH names (absolute, `-lNAME`, or a library's file name); []
    where PATH is an archive, an ELF file or no script."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SCRIPT_MAX + 1)
    except OSError:
        return []
    if head.startswith((b"!<arch>", b"\x7fELF")) or len(head) > SCRIPT_MAX:
        return []
    files = []
    for word in re.split(r"[\s(),]+", head.decode("utf-8", "surrogateescape")):
        if word.startswith("/") and not word.startswith("/*"):
            files.append(word)
        elif word.startswith("-l") and len(word) > 2:
            files += _in_dirs(f"lib{word[2:]}.so", dirs) + _in_dirs(f"lib{word[2:]}.a", dirs)
        elif LIBRARY_NAME.search(word):
            files += _in_dirs(word, [os.path.dirname(path), *dirs])
    return [f for f in files if os.path.isfile(f)]


def linked_files(search, env, cwd, named):
    """The files the linker may have read for SEARCH's libraries ({"libs": [[FILE, ...] per -l],
    "dirs", "compilers", "tops"}), and those the linker scripts among them and among NAMED name;
    None where a library is in none of the folders (its file unknown: the build is not reused)."""
    named = [n for n in named if LIBRARY_NAME.search(n)]  # not a source read as a script
    if not search or not search["libs"]:
        return [f for n in named for f in _script_files(n, [])]
    dirs = linker_dirs(search, env, cwd)
    found = []
    for files in search["libs"]:
        matches = [path for name in files for path in _in_dirs(name, dirs)]
        if not matches:
            return None
        found += matches
    return found + [f for path in [*found, *named] for f in _script_files(path, dirs)]
