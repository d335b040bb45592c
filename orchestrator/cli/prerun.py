"""A `verify` stopped before its run exists: while it waits for another run's lock (`--wait 600`
behind an overlapping cron), opens the database, or kills what an aborted run left on the nodes.

Before round 93 the run's own signal handling started only once the run was about to be stored:
a SIGTERM (a killed cron job, `systemctl stop`) or SIGHUP there killed the process outright, no
word on stderr nor in `--log`, whose last line stayed the night before's green verdict, and a
Ctrl-C ended in click's "Aborted!" and exit 1, the code of a kernel's failure. Now each is noted
here, acted on where the command next looks (the lock's wait is taken in slices for it), and the
command ends as any failed `verify` does: one `Error:` line, a dated `farm verify failed` line
in --log, exit 4 ("the run was stopped"), nothing of a run stored."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

from orchestrator.errors import StoppedBeforeRun


class EarlyStop:
    """The first stop signal heard before the run exists; `check` raises it where the command
    may stop without leaving anything half-done (never from inside the signal handler: a
    transaction or the lock's own bookkeeping cut mid-way is what a deferred stop avoids)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.phase = "before its run started"

    def heard(self, signum: int, _frame: object) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            os._exit(130)  # a second Ctrl-C exits at once, as during the run
        self.signal = self.signal or signal.Signals(signum).name

    def check(self, phase: str | None = None) -> None:
        """Raise StoppedBeforeRun once a signal came; `phase` names what the command does next
        (or did, where it is the last look), for the message."""
        if self.signal is not None:
            raise StoppedBeforeRun(
                f"farm verify was stopped by {self.signal} {phase or self.phase}: "
                "no run was stored and nothing ran; the next `farm verify` runs as usual"
            )
        if phase is not None:
            self.phase = phase


@contextlib.contextmanager
def stop_before_run() -> Iterator[EarlyStop]:
    """SIGTERM, SIGINT and SIGHUP (unless ignored: `nohup`) noted until the run's own handlers
    (run_signals.stopping_on_signals) take over; the previous handlers are back on leaving, where
    these are still the ones set: the run's own, kept until the process exits once it is stored,
    stay (red-team 171)."""
    early = EarlyStop()
    hangup = [signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else []
    previous = {sig: signal.signal(sig, early.heard) for sig in (signal.SIGTERM, signal.SIGINT, *hangup)}
    try:
        yield early
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) == early.heard:
                signal.signal(sig, handler)
