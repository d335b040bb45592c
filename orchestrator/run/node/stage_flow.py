"""Between a cell's stages on the node: each stage's control text, whether the next goes on (the
shell's gate), the files framed back, the cell's folder removed."""

import errno
import os
import stat
import sys

from orchestrator.run.node.farm_folders import own_bits_back
from orchestrator.run.node.files import OUT, remove
from orchestrator.run.node.processes import reap
from orchestrator.run.node.stages import STAGES, Stage


def frame(token, tag, path, limit, ends=False):
    """A file's first `limit` bytes as frames.py's emit() sends them (a missing
    or not regular file is an empty frame: nothing blocks on a FIFO; nor is a link followed: a
    build made its build.log a link, and the farm sent back a file of the node's user it named).
    `ends`: its size, then the whole file where it fits, else its first and last `limit // 2`
    bytes, as emit(ends=True) sends them: a build log of gigabytes ships only those."""
    handle = None
    size = 0
    unread = [False]  # there but not read (frames.emit: `@@farm-frame-unread`, no evidence)
    try:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except PermissionError:
            # a file of the cell's own the login owns, its read bit taken by the command that wrote it
            # (a build's `chmod 0 build.log`): its bits back, then read, as the run's files are (review 272);
            # a job's command had made its node's infra-error, three tries counted against the node
            own_bits_back([path])
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        handle = os.fdopen(fd, "rb")
        info = os.fstat(fd)
        size = info.st_size if stat.S_ISREG(info.st_mode) else 0
    except OSError as error:
        size = 0
        # missing, or a link (not followed): empty, as before; its mode, a folder above it
        # another cell's kernel took the bits of, the disk's error: not read
        unread[0] = error.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)
    half = limit // 2
    if not ends:
        parts, prefix = [(0, min(size, limit))], b""
    elif size <= 2 * half:
        parts, prefix = [(0, size)], b"%020d" % size
    else:
        parts, prefix = [(0, half), (size - half, half)], b"%020d" % size
    OUT.write(f"\n@@farm-frame {token} {tag} {len(prefix) + sum(n for _, n in parts)}\n".encode())
    OUT.write(prefix)
    for offset, wanted in parts:
        _part(handle, offset, wanted, unread)
    if handle is not None:
        handle.close()
    OUT.write((f"\n@@farm-frame-{'unread' if unread[0] else 'end'} {token} {tag}\n").encode())


def _part(handle, offset, wanted, unread):
    """`wanted` bytes of the file from `offset`, padded where it shrank while it was read: neither the
    stream nor the tail's place in the frame can shift. A read that failed sets `unread`."""
    left = wanted
    if handle is not None and left:
        try:
            handle.seek(offset)
        except OSError:
            left = wanted
            unread[0] = True
        else:
            while left > 0:
                try:
                    block = handle.read(min(left, 1 << 20))
                except OSError:
                    block = b""
                    unread[0] = True
                if not block:
                    break
                OUT.write(block)
                left -= len(block)
    while left > 0:
        pad = min(left, 1 << 20)
        OUT.write(b"\0" * pad)
        left -= pad


def remove_cell(run_dir):
    remove(run_dir)
    node_dir = os.path.dirname(run_dir)
    for folder in (node_dir, os.path.dirname(node_dir)):
        try:  # noqa: SIM105 - as in kill_group
            os.rmdir(folder)
        except OSError:
            pass


HEX = frozenset("0123456789abcdef")


def first_sha(kind, lines):
    """The first line `@@farm KIND SHA` (64 hex digits): its SHA, or None."""
    prefix = "@@farm " + kind + " "
    for line in lines:
        rest = line[len(prefix) :] if line.startswith(prefix) else ""
        if len(rest) == 64 and HEX.issuperset(rest):
            return rest
    return None


def count(dump, name):
    """machine_code.count_instructions without `re`: NAME not after a word character or a
    dot, nor before a word character (str.isalnum() and "_" are re's \\w)."""
    if not name:
        return 0  # no pattern to find: the node holds the run back, the farm's own count decides
    found, at, size = 0, dump.find(name), len(name)
    while at >= 0:
        before = dump[at - 1] if at else " "
        after = dump[at + size] if at + size < len(dump) else " "
        if not (before.isalnum() or before in "_.") and not (after.isalnum() or after == "_"):
            found += 1
            at = dump.find(name, at + size)
        else:
            at = dump.find(name, at + 1)
    return found


def gate(name, text, spec, ahead):
    """Whether the next stage goes on, read as the stages' shell gate reads it."""
    lines = text.decode("utf-8", "replace").split("\n")
    if name == "build":
        sha = first_sha("cached", lines)
        if sha is None:
            built, copy = first_sha("built", lines), first_sha("copy", lines)
            sha = built if built is not None and built == copy else None
        ahead["sha"] = sha or ""
        return sha is not None
    if next((line for line in lines if line.startswith("@@farm rc=")), None) != "@@farm rc=0":
        return False
    try:
        with open(os.path.join(spec["run_dir"], "inspect.txt"), "rb") as handle:
            dump = handle.read(spec["sass_limit"]).decode("utf-8", "replace")
    except OSError:
        dump = ""
    return all(count(dump, mnemonic) >= needed for mnemonic, needed in spec["instructions"].items())


def stage_text(name, spec, env, ahead):
    """The stage's control text, ending with the status the shell's `_wrap` prints."""
    out = Stage()
    try:
        STAGES[name](out, spec, env, ahead)
        out.say("@@farm end 0")
    except Exception as err:  # a fault of the runner's own is no evidence: the farm is told
        sys.stderr.write(f"farm runner: {name} stage: {err!r}\n")
        left = reap("FARM_CELL", ahead["cell"])
        if left is not None:
            out.say(f"@@farm reaped {left}")
        out.say("@@farm end 1")
    return out
