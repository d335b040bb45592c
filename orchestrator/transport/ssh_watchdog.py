"""The SSH transport's watchdog: one thread that closes a command's connection once
the command's deadline (which may move on) is past by WATCHDOG_GRACE. paramiko
waits for a channel request's reply without a timeout, and a frozen peer (a
SIGSTOPped sshd) would hold the command forever.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable

from orchestrator.transport.base import Deadline

# Seconds beyond a command's own timeout before the watchdog drops the connection.
WATCHDOG_GRACE = 15.0


STOP_THREADS = "stop-"  # the name's start of run/stopping.py's threads (its kills, its sweeps)


class Watch:
    """One command's entry in the watchdog: `fired` once its action ran."""

    def __init__(self, deadline: Deadline, action: Callable[[], None]) -> None:
        self.deadline = deadline
        self.action: Callable[[], None] | None = action
        self.fired = False
        # the stop's own kills and sweeps (run/stopping.py's threads) keep their limits through a cut:
        # cut at once, its sweeps left a cell begun as the stop came running on a healthy node
        self.stops = threading.current_thread().name.startswith(STOP_THREADS)

    @property
    def cancelled(self) -> bool:
        return self.action is None

    def cancel(self) -> None:
        self.action = None  # the connection is not kept alive until the entry's time comes


class Watchdog:
    """Closes a command's connection once its deadline (which may move) is past by
    WATCHDOG_GRACE: paramiko's channel requests wait for a frozen peer forever.
    One thread for every command of the process (a thread per command was a fifth
    of the farm's CPU per cell), started on first use: a worker process forked
    from the farm's starts its own, with none of the parent's entries."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._cut_at: float | None = None  # a stopped run's: every connection still waiting is closed then
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child (a worker): the parent's commands, its thread and the state of
        its lock are not the child's."""
        self._cond = threading.Condition()
        self._heap = []
        self._thread = None
        self._cut_at = None

    def cut(self, after: float) -> None:
        """The run is being stopped: `after` seconds from now, close the connection of every command
        still waiting (and of any begun since). A node cut off or frozen cannot be reached to kill its
        commands, and each held the stop for its whole budget (a red-team finding, round 203); a healthy
        node's commands have ended by then, killed by the stop."""
        with self._cond:
            if self._cut_at is None:
                self._cut_at = time.monotonic() + after
            for _, _, watch in list(self._heap):
                if not watch.stops:
                    heapq.heappush(self._heap, (self._cut_at, next(self._order), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="ssh-watchdog")
                self._thread.start()
            self._cond.notify()

    def cut_passed(self) -> bool:
        """Whether a stop's cut is due: what waits on a node outside a command of its own (a cell on
        the resident runner) gives up then, as the cut's commands do (red-team 207)."""
        cut_at = self._cut_at  # one read, no lock: a cell's idle second asks it
        return cut_at is not None and time.monotonic() >= cut_at

    def uncut(self) -> None:
        with self._cond:
            self._cut_at = None

    def _due(self, watch: Watch) -> float:
        due = watch.deadline.at + WATCHDOG_GRACE
        return due if self._cut_at is None or watch.stops else min(due, self._cut_at)

    def watch(self, deadline: Deadline, action: Callable[[], None]) -> Watch:
        watch = Watch(deadline, action)
        with self._cond:
            heapq.heappush(self._heap, (self._due(watch), next(self._order), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="ssh-watchdog")
                self._thread.start()
            elif self._heap[0][2] is watch:  # due before any other: the thread must wake sooner
                self._cond.notify()
        return watch

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and (self._heap[0][2].cancelled or self._heap[0][2].fired):
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                due, _, watch = self._heap[0]
                now = time.monotonic()
                if due > now:
                    self._cond.wait(due - now)
                    continue
                heapq.heappop(self._heap)
                moved = self._due(watch)
                if moved > now:  # its deadline was moved on meanwhile
                    heapq.heappush(self._heap, (moved, next(self._order), watch))
                    continue
                action = watch.action
                if action is None:
                    continue
                watch.fired = True
                # in a thread of its own: closing a connection may block (a frozen jump host's
                # channel), and the other commands' deadlines must not wait for it
                threading.Thread(target=_quietly, args=(action,), daemon=True, name="ssh-watchdog-close").start()


def _quietly(action: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):  # a connection that cannot even be closed: nothing more to do
        action()


WATCHDOG = Watchdog()
