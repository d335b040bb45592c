"""The SSH transport's watchdog: one thread for every command of the process.

It closes a command's connection once the command's deadline, which the caller
may move on, is past by WATCHDOG_GRACE (paramiko waits for a frozen peer's reply
forever). These check its order of events, not its timing: each waits for an
event with a bound far above the deadlines used.
"""

from __future__ import annotations

import threading

import pytest

from orchestrator.transport import ssh_watchdog
from orchestrator.transport.base import Deadline


@pytest.fixture
def watchdog(monkeypatch: pytest.MonkeyPatch) -> ssh_watchdog.Watchdog:
    monkeypatch.setattr(ssh_watchdog, "WATCHDOG_GRACE", 0.0)
    return ssh_watchdog.Watchdog()


def test_a_passed_deadline_fires_once_and_a_cancelled_one_never(watchdog: ssh_watchdog.Watchdog) -> None:
    fired: list[str] = []
    done = threading.Event()
    with watchdog._cond:  # the watchdog's thread waits until both are in, whatever the machine's load
        cancelled = watchdog.watch(Deadline(0), lambda: fired.append("cancelled"))
        cancelled.cancel()
        late = watchdog.watch(Deadline(0), lambda: (fired.append("late"), done.set()))
    assert done.wait(10)
    assert fired == ["late"] and late.fired and not cancelled.fired


def test_a_deadline_moved_on_is_waited_for_anew(watchdog: ssh_watchdog.Watchdog) -> None:
    """A stage that starts moves the command's deadline on (run/stages/): the watchdog
    re-reads it when the old time comes, and waits for the new one."""
    order: list[str] = []
    fixed = threading.Event()
    moved = Deadline(0)
    with watchdog._cond:  # both in, and moved on, before the watchdog's thread may look at them
        moving = watchdog.watch(moved, lambda: order.append("moved"))
        watchdog.watch(Deadline(0), lambda: (order.append("fixed"), fixed.set()))
        moved.extend(3600)
    assert fixed.wait(10)  # the moved entry came first in the queue, and was put back
    with watchdog._cond:
        assert order == ["fixed"] and not moving.fired
        assert [due for due, _, entry in watchdog._heap if entry is moving] == [moved.at + ssh_watchdog.WATCHDOG_GRACE]


def test_a_close_that_blocks_holds_up_no_other_command(watchdog: ssh_watchdog.Watchdog) -> None:
    """Closing a connection may block (a frozen jump host's channel): each close runs
    in a thread of its own, and the next command's deadline fires all the same."""
    stuck, second = threading.Event(), threading.Event()
    try:
        with watchdog._cond:
            watchdog.watch(Deadline(0), stuck.wait)  # blocks until the test ends
            watchdog.watch(Deadline(0), second.set)
        assert second.wait(10)
    finally:
        stuck.set()


def test_one_thread_serves_every_command(watchdog: ssh_watchdog.Watchdog) -> None:
    before = threading.active_count()
    watches = [watchdog.watch(Deadline(60), lambda: None) for _ in range(50)]
    assert threading.active_count() <= before + 1
    for watch in watches:
        watch.cancel()
    assert not any(w.fired for w in watches)
