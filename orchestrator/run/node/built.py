"""What makes a build folder reusable: its mark, and the list of the files its compiler read.

The build key names the job's files, the command, nvcc and the host compilers, not a header the
build read from elsewhere on the node (`-I /opt/lib/include`, `/usr/include`): one changed there
since rebuilt nothing, and the binary made from the old one passed (red-team round 61). So the
build runs with gcc's SUNPRO_DEPENDENCIES (nvcc's preprocessing is gcc's too), which lists every
file the compiler read, system headers included; after it, each one outside the farm's own
verified folders is noted with its sha256 in `.farm-read`, in sha256sum's format (the shell
scripts write and check the same file: stages/build_reads.py), and a cached build one of whose
files changed, or that has no such list, is built again.
"""

import os

from orchestrator.run.node.files import sha_of

READ_LIST = ".farm-read"  # `SHA256  PATH` per file the build read, sha256sum -c's input
READ_DEPS = ".farm-read.d"  # gcc's make rules, appended to by each compiler run of the build


def mark_built(path):
    """The mark that a build folder is whole, made by the runner where the build left no link
    (a build made it a link: the runner's own open made a file wherever it pointed)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        os.close(os.open(path, flags, 0o644))
        return True
    except OSError:
        return False


def reads_env(env, bdir):
    """The build's environment, asking gcc for the files it reads; not where the folder's path
    holds white space (gcc takes what follows a space for the rule's target, and would write
    elsewhere, refused by the build's confinement: a build that failed for the farm's sake)."""
    path = os.path.join(bdir, READ_DEPS)
    if any(c.isspace() for c in path):
        return env
    return dict(env, SUNPRO_DEPENDENCIES=path)


def _read_files(bdir, skip, named):
    try:
        with open(os.path.join(bdir, READ_DEPS), "rb") as handle:
            text = handle.read().decode("utf-8", "surrogateescape")
    except OSError:
        text = ""  # no compiler of gcc's family ran: the named files only
    words = text.replace("\\\n", " ").replace("\\", " ").split()
    found = {w for w in words if not w.endswith(":")} | set(named)
    return sorted(w for w in found if not any(w == s or w.startswith(s + "/") for s in skip))


def write_reads(bdir, skip, named):
    """`.farm-read` for a build that succeeded, of what its compilers read and the NAMED files (the
    command's absolute paths and libraries: stages/build_reads.py), those that are files now (a
    temporary file of the build's is gone); False where one cannot be hashed (the build is then
    not reused: a list that lacks a file would vouch for it)."""
    lines = []
    for name in _read_files(bdir, skip, named):
        if not os.path.isfile(os.path.join(bdir, name)):
            continue
        sha = sha_of(os.path.join(bdir, name))
        if not sha or "\n" in name:
            return False
        lines.append(f"{sha}  {name}\n")
    # the build may have left a link by that name: written through it, the runner's own write went
    # wherever it pointed, outside the build's confinement (as mark_built guards its mark)
    path = os.path.join(bdir, READ_LIST)
    try:
        if os.path.lexists(path):
            os.unlink(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with open(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write("".join(lines))
    except OSError:
        return False
    return True


def stale_read(bdir):
    """The first file a cached build read that is no longer what it read, or a reason the build
    cannot tell; None where every one is as it was."""
    try:
        with open(os.path.join(bdir, READ_LIST), encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return "(no list of the files it read)"
    for line in lines:
        sha, _, name = line.partition("  ")
        if sha_of(os.path.join(bdir, name)) != sha:
            return name
    return None
