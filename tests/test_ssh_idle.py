"""An idle connection costs the farm nothing while a node's kernels run (ssh_tuning.TunedTransport.settle).

paramiko's reader thread woke every 0.1 s to see whether its transport was closed: 1.1 ms
of the farm's CPU per connection per second, the bulk of a node's cost while its cells ran.
Once connected it sleeps in recv() until data comes (looking every IDLE_POLL s), and a close
wakes it at once, so the thread still ends with its connection.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, SshNode

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.transport import transport_for
from orchestrator.transport.ssh_tuning import DEFAULT_POLL, IDLE_POLL, QuickAck, TunedTransport


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> SshNode:
    fleet = Fleet(tmp_path_factory.mktemp("idle"))
    node = fleet.add("t4", CARDS["t4"])
    yield node
    fleet.stop()


def test_an_idle_connection_s_reader_sleeps_and_a_close_still_ends_it_at_once(
    node: SshNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    recv = QuickAck.recv

    def counted(self: QuickAck, size: int) -> bytes:
        reads.append(threading.current_thread().name)
        return recv(self, size)

    monkeypatch.setattr(QuickAck, "recv", counted)
    transport = transport_for("t4", NodeSpec(**node.farm_entry(tmp_path / "work")))
    transport.open()
    link = transport._conn.transport
    assert isinstance(link, TunedTransport)
    assert link.sock.gettimeout() == IDLE_POLL > DEFAULT_POLL
    assert transport.run("echo ok", timeout=30).stdout == "ok\n"
    reads.clear()
    time.sleep(1.5)
    # paramiko's 0.1 s poll read 14-15 times here; the settled reader once or twice (IDLE_POLL 1 s)
    assert len(reads) <= 3, reads
    clock = time.monotonic()
    transport.close()
    link.join(5)
    assert not link.is_alive()
    assert time.monotonic() - clock < IDLE_POLL / 2  # woken by the close, not by its poll


def test_a_settled_connection_still_serves_commands_after_sleeping_past_its_poll(node: SshNode, tmp_path: Path) -> None:
    with transport_for("t4", NodeSpec(**node.farm_entry(tmp_path / "work"))) as transport:
        assert transport.run("echo one", timeout=30).stdout == "one\n"
        time.sleep(IDLE_POLL * 2.5)
        assert transport.run("sleep 1.5; echo two", timeout=30).stdout == "two\n"
