"""The room a build's folders had at their lowest while it ran, read by the farm, not the build.

A disk another job fills during a build and frees before the farm's look (stages/base.py
`_node_trouble`) failed nvcc with "No space left on device", yet the look found room and a working
toolchain, and the cell was stored as the kernel's `build-fail` (red-team round 262). The log's
words are the kernel's to write, so they decide nothing; this watch samples the free space and
inodes of the build folder's file system and of the login's temporary folder while the build runs
(from the runner's own wait, and once as it ends) and says their lowest on the stage's own
channel, as the shell runner's stages/room.py fragment does. With each lowest go the room as the
build began and, where it was short, the size of the build's own folder then: a build that filled
the disk with its own files is the kernel's (run/own_fill.py, red-team round 273).
"""

import os

ROOM_EVERY = 0.1  # seconds between samples: a fill that failed a compile outlasts this many


def room_of(folder):
    """(KiB its user may still write, inodes free or None where the file system counts none), as
    `df -Pk` and `df -Pi` say them; None where it cannot be read."""
    try:
        got = os.statvfs(folder)
    except OSError:
        return None
    return got.f_bavail * got.f_frsize >> 10, got.f_ffree if got.f_files > 0 else None


def size_of(folder):
    """(KiB, inodes) FOLDER's tree takes on its own file system, as `du -sk` and `du -s --inodes` count;
    None where it cannot be read."""
    try:
        device = os.lstat(folder).st_dev
    except OSError:
        return None
    blocks, files = 0, 0
    for top, dirs, names in os.walk(folder):
        for name in dirs + names:
            try:
                got = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if got.st_dev == device:
                blocks, files = blocks + got.st_blocks, files + 1
    return blocks >> 1, files + 1


def _fell(low, got):
    """(the lower of LOW and GOT, field by field; which of its two fields GOT lowered)."""
    if low is None:
        return got, (True, got[1] is not None)
    files = got[1] if low[1] is None else low[1] if got[1] is None else min(low[1], got[1])
    return (min(low[0], got[0]), files), (got[0] < low[0], got[1] is not None and files == got[1] != low[1])


class RoomWatch:
    """FOLDERS' room, looked at as `with` starts, every ROOM_EVERY seconds of the build (its
    `tick`, called from the runner's own wait: spawn.wait_for) and as it ends; `say` prints the
    lowest. No thread of its own: a thread takes a pid, and on a node out of processes the
    build's own `sh` failed to fork in its compiler's place, its words lost (red-team round 266).
    OWN: the build's folder, sized where a folder on its file system fell under NEED (KiB, inodes)."""

    def __init__(self, folders, own=None, need=(0, 0)):
        self.folders = folders
        self.own, self.need = own, need
        self.low = [None] * len(folders)
        self.start = [None] * len(folders)
        self.mine = [[None, None] for _ in folders]  # the own folder's (KiB, inodes) at each lowest
        self.tick = (ROOM_EVERY, self._look)  # what guarded() takes

    def _look(self):
        sized = []  # the own folder's size, read once a look
        for index, folder in enumerate(self.folders):
            got = room_of(folder)
            if got is None:
                continue
            self.start[index] = self.start[index] or got
            self.low[index], fell = _fell(self.low[index], got)
            short = (got[0] < self.need[0], got[1] is not None and got[1] < self.need[1])
            for field in (0, 1):
                if fell[field] and short[field] and self.own:
                    self.mine[index][field] = self._own_on(folder, sized)[field]
                elif fell[field]:
                    self.mine[index][field] = None

    def _own_on(self, folder, sized):
        """The own folder's size where it is on FOLDER's file system (SIZED: its size once read this
        look), (0, 0) where not, ("-", "-") where unread."""
        try:
            same = os.stat(folder).st_dev == os.stat(self.own).st_dev
        except OSError:
            return "-", "-"
        if not same:
            return 0, 0
        if not sized:
            sized.append(size_of(self.own) or ("-", "-"))
        return sized[0]

    def __enter__(self):
        self._look()
        return self

    def __exit__(self, *_):
        self._look()  # as it ended: a fill its last sample missed may still be there

    def say(self, out):
        """`@@farm build-room KIB INODES START-KIB START-INODES OWN-KIB OWN-INODES` for each folder, in
        order ("-" for what was never read); nothing where none of them could be read."""
        if all(low is None for low in self.low):
            return
        for index, low in enumerate(self.low):  # by index, not zip(strict=): nodes' python3 from 3.8 on
            fields = [*(low or (None, None)), *(self.start[index] or (None, None)), *self.mine[index]]
            out.say("@@farm build-room " + " ".join("-" if f is None else str(f) for f in fields))
