"""A server database gone for a while mid-run (restarted, stopped and started, its session ended).

A run's record is journaled before its commit (journal.py); a commit the server could not take as
it went away stopped the run at once, exit 5, a night's run lost to a 5-second restart. Now a write
that failed for a lost or refused connection is tried again, with backoff, for up to farm.yaml's
`store_wait` seconds (the run goes on meanwhile: only the thread writing waits), said once on stderr
as the database goes and once as it is back; past the wait, exit 5 and `farm import` as before.
Any other failure (a full disk, a constraint, a dropped table, a statement timeout, SQLite's every
error) stops the run at once, as it did.

A commit whose connection dropped after the server took COMMIT may have landed: each write says how
to find its own rows (recording.py), and a retry that finds them takes them, never a second copy.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

from orchestrator.errors import StoreError

T = TypeVar("T")

# SQLSTATEs of a server going or gone: connection exceptions (class 08), admin/crash shutdown, starting up,
# and "sorry, too many clients already" (53300): every client of a restarted server reconnects at once,
# a moment's crowd. libpq gives a refused connection no SQLSTATE (its words are read instead, below);
# a driver that did gave 53300 and stopped the run (review 182). A farm's start never waits: its first
# connection (engine.migrate) fails at once, naming it.
GONE_STATES = ("57P01", "57P02", "57P03", "53300")
# a connection refused for what a wait cannot mend
NOT_MENDED = ("authentication failed", "does not exist", "no pg_hba.conf entry", "permission denied")
FIRST_PAUSE = 0.25  # seconds before the first retry, doubling
MOST_PAUSE = 5.0
STOP_LOOK = 0.1  # seconds between two looks at a stop while a retry waits
MIN_CONNECT = 2  # seconds: libpq's least connect_timeout
OUTAGE_CONNECT = 3  # seconds a new connection may take while the server is away (connect_timeout)


class StoreUnreachable(StoreError):
    """The server could not be reached (the run lock's session could not be made again)."""


def _causes(err: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while err is not None and err not in seen:
        seen.append(err)
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return seen


def transient(err: BaseException) -> bool:
    """Whether `err` is a PostgreSQL server gone or refusing connections for now (see the module)."""
    for cause in _causes(err):
        if isinstance(cause, StoreUnreachable):
            return True
        if not type(cause).__module__.startswith("psycopg"):
            continue
        state = getattr(cause, "sqlstate", None)
        if state is not None:
            return state.startswith("08") or state in GONE_STATES
        said = str(cause).lower()
        # no SQLSTATE: the socket's own end (refused, closed unexpectedly, the server starting up), or
        # psycopg's ConnectionTimeout, an OperationalError of its own (a server that drops packets): read
        # by its exact name, a connection timed out stopped the run at once (review 182)
        operational = any(kind.__name__ == "OperationalError" for kind in type(cause).__mro__)
        return operational and not any(word in said for word in NOT_MENDED)
    return False


def stopped_of(outage: Outage) -> Callable[[], str | None]:
    """outage.stopped, read through a weak reference (the store's watchdog keeps no store alive)."""
    ref = weakref.ref(outage)
    return lambda: found.stopped() if (found := ref()) is not None else None


def say_on_stderr(line: str) -> None:
    """guarded.aside: a stalled stderr never holds the writing thread, a live display is never torn."""
    from orchestrator.guarded import aside

    aside(line)


class Outage:
    """The database's absence, shared by every thread that writes: one line as it goes, one as
    it is back, one deadline for all (`wait` seconds from its first failed write)."""

    def __init__(self, wait: float = 0.0, say: Callable[[str], None] = say_on_stderr) -> None:
        self.wait = wait
        self.say = say
        # why the run is being stopped (its SIGTERM), or None: a stopped run's writes wait no longer
        # (each node's write and the run's end retried for all of store_wait, 120 s, past systemd's
        # 90 s before its SIGKILL: review 178); its records are in its journal
        self.stopped: Callable[[], str | None] = lambda: None
        self._since: float | None = None
        self._lock = threading.Lock()
        # failed writes counted: a write after any (a new one of another thread, not only a retry) looks
        # at the run lock whatever lock.CHECK_EVERY says (database.Store._check_file, review 182)
        self.failures = 0

    def retrying(
        self, write: Callable[[], T], landed: Callable[[], T | None], before: Callable[[], None], where: str
    ) -> T:
        """write(), tried again while it fails transiently and the wait lasts; before each retry,
        before() (the run lock looked at anew) and landed(), whose value, where not None, is the
        failed try's own rows, committed after all."""
        tries = 0
        while True:
            began = time.monotonic()
            try:
                if tries:
                    before()
                    found = landed()
                    if found is not None:
                        break
                found = write()
                break
            except StoreError as err:
                if self.wait <= 0 or not transient(err):
                    raise
                pause = self._failed(err, tries, where, began)
                tries += 1
                self._pause(err, pause)
        if tries:
            self._back(where)
        return found

    def _pause(self, err: StoreError, pause: float) -> None:
        """Sleep `pause` seconds, or raise once the run is stopped (before or during the sleep)."""
        until = time.monotonic() + pause
        while True:
            if (why := self.stopped()) is not None:
                raise StoreError(f"{err} (the run was stopped by {why} while it waited for the database)")
            left = until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, STOP_LOOK))

    def expired(self) -> bool:
        """Whether a write waiting its turn gives up now: the server away, and the run stopped or
        the wait over (a stopped run's end, the server there, is still written)."""
        with self._lock:
            since = self._since
        return since is not None and (self.stopped() is not None or time.monotonic() >= since + self.wait)

    def connect_timeout(self) -> int | None:
        """The seconds a new connection may take while the server is away (None: the engine's own).
        A server that drops packets (a firewall, a partition) costs each try the whole connect_timeout,
        10 s, under the write lock, every other thread behind it: four threads took 40 s past a
        store_wait of 4 s, and a SIGTERM waited behind them (review 182). During an outage a try gets
        3 s (a server back answers in milliseconds; a SIGTERM waits out no more), less what is left
        of its wait, libpq's least 2 s; a stopped run's, 2 s. Before any: no more than the wait itself."""
        with self._lock:
            since = self._since
        if self.stopped() is not None:
            return MIN_CONNECT
        if since is None:
            return max(MIN_CONNECT, math.ceil(self.wait)) if self.wait > 0 else None
        return max(MIN_CONNECT, min(OUTAGE_CONNECT, math.ceil(since + self.wait - time.monotonic())))

    def _failed(self, err: StoreError, tries: int, where: str, began: float) -> float:
        """The pause before the next try; raises where the wait has run out. The wait counts from
        the start of the first failed try: a connection that took its whole timeout to fail is part of it."""
        now = time.monotonic()
        with self._lock:
            self.failures += 1
            if self._since is None:
                self._since = began
                self.say(
                    f"the results database {where} is unreachable ({err}); the run goes on and its writes are "
                    f"tried again for up to {self.wait:g} s (farm.yaml's store_wait)"
                )
            since = self._since
        left = since + self.wait - now
        if left <= 0:
            raise StoreError(f"{err} (the database stayed unreachable for {self.wait:g} s: farm.yaml's store_wait)")
        return min(FIRST_PAUSE * 2**tries, MOST_PAUSE, left)

    def _back(self, where: str) -> None:
        with self._lock:
            if self._since is None:
                return
            gone, self._since = time.monotonic() - self._since, None
        self.say(f"the results database {where} is back after {gone:.1f} s; the run's writes go on")
