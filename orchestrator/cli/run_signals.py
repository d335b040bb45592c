"""The run's signals: SIGTERM, SIGHUP and Ctrl-C stop a run (or a bisection's walk of runs)
cleanly, and once the run is stored, until the process exits, only hurry that exit."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from orchestrator.guarded import aside, hurry


class Stoppable(Protocol):
    """What a signal stops: a run (FarmRun), or a bisection's walk of runs (Bisector)."""

    @property
    def stopping(self) -> str | None: ...

    @property
    def ended(self) -> bool: ...

    def stop(self, reason: str) -> object: ...


@contextlib.contextmanager
def stopping_on_signals(run: Stoppable, until_exit: bool = False):
    """SIGTERM (systemctl stop, a killed cron job), SIGHUP and a first Ctrl-C stop the run
    cleanly: no new cells, the running ones killed on every node, the unfinished
    ones recorded not-run, the run stored aborted with the exit code the process
    returns. A second Ctrl-C exits at once (the next run marks this one aborted)."""

    def handle(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if run.stopping is not None:
            if signum == signal.SIGINT:
                os._exit(130)
            return
        # the stop first, then the note, which never waits on stderr's reader: a stalled stderr held the
        # note's write, on this (the main) thread, before the stop began (red-team 171)
        threading.Thread(target=run.stop, args=(name,), name="stop", daemon=True).start()
        if run.ended:  # stored whole: nothing runs to kill (it said so during the report's render: round 93)
            aside(f"{name}: the run has ended and is stored; the farm exits once its report is written")
        else:
            aside(f"{name}: stopping run: no new cells; killing the running ones on every node")

    previous = _install(handle)
    try:
        yield
    finally:
        # `until_exit`, the run stored: a signal from here to the process's exit (its lock let go, its last
        # lines waiting on a reader) returned 143 or 129 over a run stored with exit 0 (red-team 171); it
        # now only hurries the exit, which returns the stored code
        for sig, handler in previous.items():
            signal.signal(sig, _exit_stored if until_exit and run.ended else handler)


def _exit_stored(signum: int, _frame: object) -> None:
    hurry()
    aside(f"{signal.Signals(signum).name}: the run has ended and is stored; the farm exits with its stored code")


class Stopped(KeyboardInterrupt):
    """A stop signal, raised where the main thread is (raising_on_signals)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.name = signal.Signals(signum).name


@contextlib.contextmanager
def raising_on_signals() -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP (unless ignored: `nohup`) raise Stopped, so a command with no
    run to stop unwinds: a file it was writing is removed, not left beside its name (pagewriter's
    temporary), and it says so. SIGTERM and SIGHUP had killed it where it stood (red-team 230)."""

    def handle(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    previous = _install(handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _install(handle: Callable[[int, Any], None]) -> dict[signal.Signals, Any]:
    """`handle` for SIGTERM, SIGINT and SIGHUP; the handlers before it. A hangup (the ssh session `farm
    verify` ran in closed) killed the farm outright: its kernels ran on, the run stayed `running` (a
    red-team finding); it is handled as SIGTERM is, unless ignored (`nohup`: meant to outlive its session)."""
    hangup = [signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else []
    return {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT, *hangup)}
