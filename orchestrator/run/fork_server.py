"""The fork server's socket, unnamed once a run's workers have started from it.

Python's fork server (3.11: no authentication) forks and unpickles for whoever connects to its
socket, a file in the farm's temporary folder that /proc/net/unix names to any process. A kernel
of a `local` node is the farm's user, and Landlock (through ABI 7) does not confine a connect() to
a named socket: a confined kernel connected, sent its own pipes and a pickle, and ran a command
unconfined, as the farm, with its environment (the database's password), while the run went on
(red-team 187). A run starts all its workers first, before any node's command, so the name is
removed then: the server keeps serving the connections it has, and no one can make a new one.
"""

from __future__ import annotations

import contextlib
import os
from multiprocessing import forkserver


def unname() -> None:
    """Remove the fork server's socket from its folder (where it has one)."""
    address = getattr(forkserver._forkserver, "_forkserver_address", None)
    if isinstance(address, str) and address:
        with contextlib.suppress(OSError):
            os.unlink(address)


def retire() -> None:
    """Stop the fork server once the run's workers ended: with its name gone it can start no
    worker for the next run in this process (a library caller, the fleet bench), which starts a
    fresh one, named anew."""
    with contextlib.suppress(OSError, AttributeError):
        forkserver._forkserver._stop()
