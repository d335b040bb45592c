"""The node-side cell runner: a cell's stages in one python3 process on the node.

Never imported by the farm. Its source is sent on the command's stdin each time
it is used, with the cell's plan after it (`python3 -I -S -c BOOTSTRAP`), so it
is never a file on the node that a kernel of the same user could rewrite, and
the plan's frame token is in no process's command line or environment.

It prints exactly what the stages' shell scripts print (stages/), status lines and
frames alike, and the farm reads both with the same parsers: this is the same
protocol, spoken by one process instead of about fifty short ones (hashes,
copies, clocks, frames and the /proc scan for leftovers are done here, not by
sha256sum, cp, date, head and grep). The commands the farm user wrote (build,
inspect, run) still go to `sh -c`, under the same timeouts and process-group
kills as the shell's `timeout -k`.

Standard library only, Python 3.8 or later (the probe checks the version).
"""

import os
import sys
import time

from orchestrator.run.node.spawn import spawn, wait_for
from orchestrator.run.node.stages import LOGIN_ENV, UMASK

OUT = sys.stdout.buffer
KILL_GRACE = 5


def now() -> int:
    """The node's monotonic clock, in ns: whatever the runner stamps (a stage's section marks, the GPU's
    wait, a kernel's and each sanitizer tool's start and end) the farm reads only as a difference from
    another stamp of the same command, so a wall clock stepped mid-stage (NTP) made a kernel or a tool
    killed at its timeout read unfinished, one killed early timed out, and a stage's seconds negative.
    The shell scripts' NOW_NS reads /proc/uptime for the same reason. The stage start times the farm
    shows are its own wall clock's, when it sent the command, plus these differences (trips.py)."""
    return time.monotonic_ns()


try:  # CPython's own SHA-256: no OpenSSL to load (hashlib's import is a tenth of a cell's CPU here)
    from _sha2 import sha256 as _builtin_sha256  # 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256 as _builtin_sha256  # 3.8 to 3.11
    except ImportError:  # a python built without its own hashes
        _builtin_sha256 = None
BIG = 1 << 18  # from here on OpenSSL's (six times faster per byte) repays its import


def sha256(size=0):
    """A sha256 object: OpenSSL's (hashlib) for a big input or once it is loaded, else the builtin's."""
    if _builtin_sha256 is None or size >= BIG or "hashlib" in sys.modules:
        import hashlib

        return hashlib.sha256()
    return _builtin_sha256()


def sha_of(path):
    """The file's sha256, or "" where `sha256sum < path` would print nothing."""
    try:
        with open(path, "rb") as handle:
            digest = sha256(os.fstat(handle.fileno()).st_size)
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return ""
    return digest.hexdigest()


def folder_digest(folder):
    """What config/inputs.py's FOLDER_DIGEST_SH prints for the folder ("" where it
    is missing): the sorted listing of every entry that is not a folder, then
    sha256sum's line for every regular file, hashed together."""
    if not os.path.isdir(folder):
        return ""
    entries = []

    def walk(path, rel):
        try:
            listing = os.scandir(path)
        except OSError:
            return  # find says so on stderr and goes on
        with listing:
            for entry in listing:
                name = rel + b"/" + entry.name
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    is_file = entry.is_file(follow_symlinks=False)
                except OSError:
                    is_dir = is_file = False
                if is_dir:
                    walk(entry.path, name)
                else:
                    entries.append((name, is_file, entry.path))

    walk(os.fsencode(folder), b".")
    entries.sort()
    text = bytearray()
    for name, _, _ in entries:
        text += name + b"\n"
    for name, is_file, path in entries:
        if not is_file:
            continue
        digest = sha_of(path)
        if not digest:
            continue  # unreadable: sha256sum prints no line for it
        if b"\\" in name or b"\n" in name:
            text += b"\\" + digest.encode() + b"  " + name.replace(b"\\", b"\\\\").replace(b"\n", b"\\n") + b"\n"
        else:
            text += digest.encode() + b"  " + name + b"\n"
    digest = sha256(len(text))
    digest.update(bytes(text))
    return digest.hexdigest()


def _owners_bits(name, dir_fd=None):
    """Give the folder NAME its owner's read, write and search bits back, never following a link:
    Landlock handles no chmod, and a kernel that took them from a folder of its work folder (`chmod
    000 junk`) kept the files in it from the farm's removals (not root's), its node "out of room" for
    its own failure and every later cell's (red-team round 164)."""
    held = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:  # the very folder opened, by its descriptor's link in /proc: no name swapped meanwhile
        os.chmod(f"/proc/self/fd/{held}", (os.fstat(held).st_mode & 0o7777) | 0o700)
    finally:
        os.close(held)


def _open_folder(name, dir_fd=None):
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except PermissionError:
        _owners_bits(name, dir_fd)
        return os.open(name, flags, dir_fd=dir_fd)


def _remove_in(folder):
    """Empty an open folder, never following a link (as rm -rf and shutil.rmtree), giving each
    folder its owner's bits back where they were taken (_owners_bits)."""
    mode = os.fstat(folder).st_mode
    if mode & 0o700 != 0o700:  # its entries are unlinked through it: write and search
        os.fchmod(folder, (mode & 0o7777) | 0o700)
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            inner = _open_folder(entry.name, folder)
            try:
                _remove_in(inner)
            finally:
                os.close(inner)
            os.rmdir(entry.name, dir_fd=folder)
        else:
            os.unlink(entry.name, dir_fd=folder)


def remove(path):
    """rm -rf: True when nothing is left at `path`."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            folder = _open_folder(path)
            try:
                _remove_in(folder)
            finally:
                os.close(folder)
            os.rmdir(path)
        elif os.path.lexists(path):
            os.unlink(path)
    except (OSError, RecursionError):  # deeper than the runner's stack or descriptors: rm's turn
        with open(os.devnull, "rb") as nothing:
            # removal.py's; chmod follows a link named on its command line, rm removes only the link
            chmod = [] if os.path.islink(path) else [["chmod", "-R", "u+rwx", "--", path]]
            for argv in (*chmod, ["rm", "-rf", "--", path]):
                pid = spawn(argv, None, LOGIN_ENV or os.environ, *(nothing.fileno(),) * 3)
                if pid is None or wait_for(pid, 600) is None:
                    return False
    return not os.path.lexists(path)


def make_dirs(path, tries=100):
    """mkdir -p, again where a parent went meanwhile: another cell's remove_cell
    removes its node's and run's folders once they look empty, between the
    parents made here and the folder made in them. Each try loses that race
    again at a rate of its own (one in five, two threads doing nothing else):
    five tries lost all of theirs about once in 1,500 copies on a loaded machine."""
    for _ in range(tries - 1):
        try:
            os.makedirs(path, exist_ok=True)
            return
        except FileNotFoundError:
            continue
    os.makedirs(path, exist_ok=True)


def fresh_copy(binary, private):
    """PRIVATE anew from BINARY, whatever stands in its place now: an unconfined kernel (the
    shell runner's) may have replaced it, and a link left there must not be written through
    (hence remove, then O_EXCL). Its mode is the farm's (runnable), not the build's: Landlock
    does not handle chmod, and a confined kernel that took the execute bits of every cached
    build failed later cells, and later runs, as "copy gone" (a red-team finding)."""
    if not remove(private):
        return False
    try:
        make_dirs(os.path.dirname(private))
        with open(binary, "rb") as source, open(private, "xb") as copy:
            for block in iter(lambda: source.read(1 << 20), b""):
                copy.write(block)
        os.chmod(private, 0o755 & ~UMASK)
    except OSError:
        return False
    return True


def take_copy(binary, run_dir, private):
    """rm -rf RUN_DIR && mkdir -p RUN_DIR/work PRIVATE's folder && cp BINARY PRIVATE (fresh_copy)."""
    if not remove(run_dir):
        return False
    try:
        make_dirs(os.path.join(run_dir, "work"))
    except OSError:
        return False
    return fresh_copy(binary, private)


def files_lost(run_dir, kernel_files, handles):
    """The names of the cell's run files (its stdout, stderr, statuses, other output) that could not
    be opened before its run (HANDLES' None) or are no file after it: its folder removed under the
    run (a node's cleaner, an operator's `rm -rf` of the work folder), a disk gone read-only or out
    of inodes. Their empty read-back had judged a kernel that ran and passed "never started": a fail
    (a red-team finding)."""
    paths = (os.path.join(run_dir, "stdout"), os.path.join(run_dir, "stderr"), *kernel_files)
    # by index, not zip(strict=): the runner serves nodes' python3 from 3.8 on
    return [os.path.basename(p) for i, p in enumerate(paths) if handles[i] is None or not os.path.isfile(p)]


def kill_group(pid, sig):
    try:  # noqa: SIM105 - contextlib is an import the runner does without
        os.killpg(pid, sig)
    except OSError:
        pass


def watch(private, folder):
    """A function saying whether the kernel's copy is still unread, its access time set to 0 for
    it, where the file system sets that time on a read, as a read of FOLDER beside it shows (not
    on a noatime mount, nor a network one serving reads from its cache); None elsewhere. A
    launcher that fails before it starts the kernel (`taskset -c 4095 {binary}`: "Invalid
    argument", exit 1) never reads it, and its words read as the kernel's refusal (a red-team
    finding); an exec, or a tool loading the file, does."""
    try:
        held = os.stat(folder)
        os.utime(folder, ns=(0, held.st_mtime_ns))
        os.listdir(folder)
        if os.stat(folder).st_atime_ns == 0:
            return None
        os.utime(private, ns=(0, os.stat(private).st_mtime_ns))
    except OSError:
        return None

    def unread():
        try:
            return os.stat(private).st_atime_ns == 0
        except OSError:
            return False

    return unread
