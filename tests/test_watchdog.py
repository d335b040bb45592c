"""The SSH transport's watchdog: one thread for every command of the process.

It closes a command's connection once the command's deadline, which the caller
may move on, is past by WATCHDOG_GRACE (paramiko waits for a frozen peer's reply
forever). These check its order of events, not its timing: each waits for an
event with a bound far above the deadlines used.
"""

from __future__ import annotations

import threading

import pytest

from orchestrator.transport import ssh
from orchestrator.transport.base import Deadline


@pytest.fixture
def watchdog(monkeypatch: pytest.MonkeyPatch) -> ssh._Watchdog:
    monkeypatch.setattr(ssh, "WATCHDOG_GRACE", 0.0)
    return ssh._Watchdog()


def test_a_passed_deadline_fires_once_and_a_cancelled_one_never(watchdog: ssh._Watchdog) -> None:
    fired: list[str] = []
    done = threading.Event()
    cancelled = watchdog.watch(Deadline(0.05), lambda: fired.append("cancelled"))
    cancelled.cancel()
    late = watchdog.watch(Deadline(0.2), lambda: (fired.append("late"), done.set()))
    assert done.wait(10)
    assert fired == ["late"] and late.fired and not cancelled.fired


def test_a_deadline_moved_on_fires_after_one_that_was_not(watchdog: ssh._Watchdog) -> None:
    """A stage that starts moves the command's deadline on (stages.py): the watchdog
    re-reads it when the old time comes, and waits for the new one."""
    order: list[str] = []
    both = threading.Event()
    moved = Deadline(0.05)
    watchdog.watch(moved, lambda: (order.append("moved"), both.set()))
    watchdog.watch(Deadline(0.3), lambda: order.append("fixed"))
    moved.extend(1.0)
    assert both.wait(10)
    assert order == ["fixed", "moved"]


def test_one_thread_serves_every_command(watchdog: ssh._Watchdog) -> None:
    before = threading.active_count()
    watches = [watchdog.watch(Deadline(60), lambda: None) for _ in range(50)]
    assert threading.active_count() <= before + 1
    for watch in watches:
        watch.cancel()
    assert not any(w.fired for w in watches)
