"""Fix 166: an sshd that takes the connection and drops it before the login is no reboot.

A node out of processes (CI, test_review119): its sshd accepts the TCP connection and, unable to
fork the session, resets it. The farm read that as the node gone ("cannot connect ... Connection
reset by peer", unreachable) and waited out its reconnect window, 300 s by default, for a reboot
that was not coming: a run held five minutes a try. The machine is up (a rebooting one refuses the
connection or lets it time out): the reset is a passing fault of the node, retried and counted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import descendants, wait_for
from nodes import CARDS, SshNode, running_node
from test_redteam116 import NAME as NAME116
from test_redteam116 import midrun
from test_review119 import group  # noqa: F401 - the fixture

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import EXIT_INFRA, ConnectError
from orchestrator.transport import transport_for

NAME = NAME116  # midrun's node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    yield from running_node(NAME, tmp_path / "node", CARDS["t4"])


@pytest.fixture
def at_its_limit(node: SshNode, group: Path) -> None:  # noqa: F811
    """The node's sshd and all under it in round 119's pids cgroup, at its limit."""
    assert node.proc is not None
    for pid in [node.proc.pid, *(pid for pid, _ in descendants(node.proc.pid))]:
        with contextlib.suppress(OSError):  # ended meanwhile
            (group / "cgroup.procs").write_text(str(pid))
    (group / "pids.max").write_text((group / "pids.current").read_text().strip())


@pytest.mark.usefixtures("at_its_limit")
def test_a_connection_dropped_before_the_login_is_no_reboot(node: SshNode, tmp_path: Path) -> None:
    """Before: ConnectError "cannot connect ... (ConnectionResetError ...)", unreachable (the run
    waited for the node's reboot). Figure: refused at once, retryable, not unreachable, saying the
    node's sshd is up and could not start a session, out of processes maybe."""
    began = time.monotonic()
    spec = NodeSpec(**node.farm_entry(tmp_path / "work", connect_timeout=5))
    with pytest.raises(ConnectError) as refused, transport_for(NAME, spec) as t:
        t.run("true", timeout=10)
    assert time.monotonic() - began < 5, "a drop is not a timeout"
    said = str(refused.value)
    assert not refused.value.unreachable and refused.value.retryable, said
    assert "dropped it before the login" in said and "out of processes" in said, said


def test_a_node_that_refuses_the_connection_is_still_unreachable(node: SshNode, tmp_path: Path) -> None:
    """The other side: sshd stopped (a reboot's first moments) refuses the connection: unreachable."""
    node.stop()
    spec = NodeSpec(**node.farm_entry(tmp_path / "work", connect_timeout=5))
    with pytest.raises(ConnectError) as refused, transport_for(NAME, spec) as t:
        t.run("true", timeout=10)
    assert refused.value.unreachable, refused.value


@pytest.mark.parametrize("headroom", [0, 1])
def test_a_node_that_drops_every_connection_after_a_lost_session_is_not_waited_for(
    node: SshNode,
    group: Path,  # noqa: F811
    tmp_path: Path,
    headroom: int,
) -> None:
    """The farm's sessions lost mid-cell (their sshd killed: SessionLost, unreachable, so the node
    is awaited), and from then on its sshd at its process limit (HEADROOM 0), or one process under it
    (1: a connection's sshd starts, its session cannot: CI met this timing with 0). Before: the wait's
    every try met the drop or the lost session, read as the node still away, and the run waited out
    the 300 s window (the test's 120 s join failed). Figure: the run ends, its cells infra-error."""

    def lost_then_limited(_: Path) -> None:
        assert node.proc is not None
        sessions = [pid for pid, _ in descendants(node.proc.pid)]
        (group / "cgroup.procs").write_text(str(node.proc.pid))
        # no fork until the limit below: a reconnect between the sessions' end and the limit's write
        # got in with room to spare and met the limit later, in its runner (CI at 60fb2b4: "Cannot fork")
        (group / "pids.max").write_text((group / "pids.current").read_text().strip())
        for pid in sessions:  # every connection's sshd and all under it
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not descendants(node.proc.pid), 10, "the sessions' end")
        (group / "pids.max").write_text(str(int((group / "pids.current").read_text()) + headroom))

    began = time.monotonic()
    code, rows, _ = midrun(node, tmp_path, lost_then_limited)
    assert time.monotonic() - began < 100
    assert code == EXIT_INFRA
    assert rows["slow"]["outcome"] == "infra-error", rows["slow"]["reason"]
    assert "when it answered again" in rows["slow"]["reason"], rows["slow"]["reason"]
    assert "unreachable for the whole reconnect window" not in rows["slow"]["reason"], rows["slow"]["reason"]
    assert rows["after"]["outcome"] == "infra-error", rows["after"]["reason"]
    if not headroom:  # what the node answered: mostly the drop; a process of the cgroup may end
        # between the limit's write and the next try, which then logs in and cannot run its check (the
        # third path, headroom 1's), as CI met once at 3c905e7: each is said, and both end the wait
        said = ("dropped it before the login", "it answered, but")
        for cell in ("slow", "after"):
            assert any(words in rows[cell]["reason"] for words in said), rows[cell]["reason"]
