"""The farm process kept from its `local` node's kernels, which run as its own Unix user.

A kernel the node cannot confine (`runner: shell`, a node without Landlock) walked up its parent
chain to the farm and read its /proc/PID/environ (the operator's PGPASSWORD, FARM_DATABASE with
its password, a CI's tokens), opened /proc/PID/mem read-write (the verdicts it holds), opened its
results database and journal through /proc/PID/fd, and could ptrace it (red-team round 135).
A non-dumpable process's /proc files are root's and ptrace of it needs CAP_SYS_PTRACE, as the
node runner makes itself (run/node/serve.py). What the farm starts gets it back at its exec.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3


@functools.cache
def keep_private() -> bool:
    """prctl(PR_SET_DUMPABLE, 0) for the rest of this process (once: it is never undone, since a
    kernel's leftover could read what it holds any time after). False where prctl is missing
    (not Linux): the farm runs as before."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
