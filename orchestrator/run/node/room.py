"""The room a build's folders had at their lowest while it ran, read by the farm, not the build.

A disk another job fills during a build and frees before the farm's look (stages/base.py
`_node_trouble`) failed nvcc with "No space left on device", yet the look found room and a working
toolchain, and the cell was stored as the kernel's `build-fail` (red-team round 262). The log's
words are the kernel's to write, so they decide nothing; this watch samples the free space and
inodes of the build folder's file system and of the login's temporary folder while the build runs
(from the runner's own wait, and once as it ends) and says their lowest on the stage's own
channel, as the shell runner's stages/room.py fragment does.
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


class RoomWatch:
    """FOLDERS' room, looked at as `with` starts, every ROOM_EVERY seconds of the build (its
    `tick`, called from the runner's own wait: spawn.wait_for) and as it ends; `say` prints the
    lowest. No thread of its own: a thread takes a pid, and on a node out of processes the
    build's own `sh` failed to fork in its compiler's place, its words lost (red-team round 266)."""

    def __init__(self, folders):
        self.folders = folders
        self.low = [None] * len(folders)
        self.tick = (ROOM_EVERY, self._look)  # what guarded() takes

    def _look(self):
        for index, folder in enumerate(self.folders):
            got = room_of(folder)
            low = self.low[index]
            if got is None:
                continue
            if low is None:
                self.low[index] = got
                continue
            files = got[1] if low[1] is None else low[1] if got[1] is None else min(low[1], got[1])
            self.low[index] = (min(low[0], got[0]), files)

    def __enter__(self):
        self._look()
        return self

    def __exit__(self, *_):
        self._look()  # as it ended: a fill its last sample missed may still be there

    def say(self, out):
        """`@@farm build-room KIB INODES` for each folder, in order ("-" for what was never read);
        nothing where none of them could be read."""
        if all(low is None for low in self.low):
            return
        for low in self.low:
            kib, files = low if low is not None else ("-", None)
            out.say(f"@@farm build-room {kib} {'-' if files is None else files}")
