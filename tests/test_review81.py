"""Review round 81: known_hosts as OpenSSH reads it, and the connections ssh.py opens.

Findings:

1. A hashed known_hosts entry (`ssh-keygen -H`, Debian's default HashKnownHosts) was refused
   for a node whose farm.yaml host has capitals (`host: GPU7.site.net`): OpenSSH lowercases the
   name before it hashes it and connects; the farm hashed it as written, and every cell was
   infra-error "not in known_hosts" (the line it said to add, capitals and all, OpenSSH never
   finds). Names were also lowered by Python's Unicode rules (a Kelvin sign matched `k`),
   where OpenSSH lowers ASCII only.
2. A node behind a jump host left the jump host's connection open at each close (Fabric's
   Connection.close() does not close its gateway): one more open connection to the bastion,
   and its paramiko thread, for every reconnect probe, every overflow connection (MaxSessions)
   and every stop sweep, until the farm exited.
3. Siblings shared one SFTP client (Fabric memoizes Connection.sftp()): a worker thread whose
   transport closed (after a broken session) closed it under the others, whose next upload
   failed "Socket is closed" (infra-error). Each transport now opens its own.
4. A connection refused at its handshake (a host key not listed, a changed one, authentication
   failed) was never closed: Fabric's close() closes only a connection it saw open, and
   paramiko's connect() leaves its transport running when the host-key policy or the
   authentication raises. Each refusal left a live connection to the node (its socket and
   paramiko's thread) until the farm exited: a reconnect window's probes, `farm nodes`, every
   node of a fleet whose known_hosts is stale.
5. The watchdog of a command still waiting for a session of its own (MaxSessions: the thread's
   own connection being opened, to an sshd slow to authenticate, or asked again for
   OVERFLOW_WAIT) closed the node's shared connection when the command's deadline came: a
   healthy connection, with the resident runner's channel and every sibling's commands on it,
   cut for one thread's wait. It now closes only the connection its command's channel is on.
6. A node that went away twice in a run: the second time its cells said "unreachable for the
   whole reconnect window: <the first outage's error>" where no try of the second had failed
   that way (ctx.down_why was kept once the node was back).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest
from faults import TunedNode
from nodes import CARDS, SSH_KEYGEN, Fleet, SshNode

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import CommandTimeout, ConnectError, HostKeyError
from orchestrator.transport import known_hosts, transport_for


@pytest.fixture
def node(tmp_path: Path):
    made = SshNode("odd", tmp_path / "node", CARDS["t4"])
    made.prepare()
    made.start()
    yield made
    made.stop()


def _openssh(node: SshNode, host: str, known: Path) -> subprocess.CompletedProcess[str]:
    options = [f"UserKnownHostsFile={known}", "GlobalKnownHostsFile=/dev/null", "StrictHostKeyChecking=yes"]
    command = ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-i", str(node.client_key), "-p", str(node.port)]
    for option in options:
        command += ["-o", option]
    command += ["-l", node.user, host, "echo ok"]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_a_hashed_entry_knows_a_host_written_with_capitals(node: SshNode, tmp_path: Path) -> None:
    """Finding 1, against the real `ssh`: both connect, or the farm refuses what OpenSSH accepts."""
    known = tmp_path / "known_hosts"
    known.write_text(f"[localhost]:{node.port} {node.host_public_key}\n")
    subprocess.run([SSH_KEYGEN, "-H", "-f", str(known)], check=True, capture_output=True)
    assert _openssh(node, "LOCALHOST", known).stdout.strip() == "ok"
    entry = node.farm_entry(tmp_path / "work", host="LOCALHOST", known_hosts=str(known))
    with transport_for("odd", NodeSpec(**entry)) as transport:
        assert transport.run("echo ok", timeout=30).stdout.strip() == "ok"


def test_names_are_lowered_as_openssh_lowers_them_ascii_only() -> None:
    """OpenSSH's lowercase() is C's tolower: a Kelvin sign (U+212A) is no `k`."""
    assert known_hosts.names_match("GPU1.Site.NET", "gpu1.site.net")
    assert known_hosts.names_match("gpu1.site.net", "GPU1.SITE.NET")
    assert not known_hosts.names_match("node\u212a", "nodek")
    assert not known_hosts.names_match("nodek", "node\u212a")


def test_closing_a_node_behind_a_jump_host_closes_the_jump_connection(node: SshNode, tmp_path: Path) -> None:
    """Finding 2: after close() the bastion's connection is closed too, not left open."""
    fleet = Fleet(tmp_path / "bastion")
    bastion = fleet.add("bastion", None, start=False)
    bastion.authorized_keys.write_text(node.client_key.with_suffix(".pub").read_text())
    bastion.start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(node.known_hosts_line() + "\n" + bastion.known_hosts_line() + "\n")
        entry = node.farm_entry(
            tmp_path / "work", known_hosts=str(known), jump=f"{bastion.user}@127.0.0.1:{bastion.port}"
        )
        transport = transport_for("odd", NodeSpec(**entry))
        transport.open()
        twin = transport.sibling()
        assert transport.run("echo ok", timeout=30).stdout.strip() == "ok"
        jump = transport._conn.gateway.transport
        twin.close()
        assert jump.is_active(), "a sibling's close must not close the connection the others share"
        transport.close()
        for _ in range(50):
            if not jump.is_active():
                break
            time.sleep(0.1)
        assert not jump.is_active(), "the jump host's connection was left open"
    finally:
        fleet.stop()


def test_a_siblings_close_leaves_the_others_sftp_open(node: SshNode, tmp_path: Path) -> None:
    """Finding 3: two threads' transports of one connection; the first closes; the second uploads."""
    payload = tmp_path / "payload"
    payload.write_bytes(b"x" * 1000)
    with transport_for("odd", NodeSpec(**node.farm_entry(tmp_path / "work"))) as transport:
        twin = transport.sibling()
        transport.put(payload, str(tmp_path / "first"))
        twin.put(payload, str(tmp_path / "second"))
        twin.close()  # e.g. a worker thread's session broke: its transport is closed and reopened
        transport.put(payload, str(tmp_path / "third"))
    assert (tmp_path / "third").read_bytes() == payload.read_bytes()


def _live_transports() -> set[paramiko.Transport]:
    return {t for t in threading.enumerate() if isinstance(t, paramiko.Transport) and t.is_active()}


@pytest.mark.parametrize("refusal", ["unlisted", "changed", "authentication"])
def test_a_connection_refused_at_its_handshake_is_closed(node: SshNode, tmp_path: Path, refusal: str) -> None:
    """Finding 4: nothing of a refused connection is left running."""
    entry = node.farm_entry(tmp_path / "work")
    if refusal == "unlisted":
        node.known_hosts.write_text("")
    elif refusal == "changed":
        other = tmp_path / "other"
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
        node.known_hosts.write_text(node.known_hosts_line(" ".join(other.with_suffix(".pub").read_text().split()[:2])))
    else:
        stranger = tmp_path / "stranger"
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
        entry["key_file"] = str(stranger)
    before = _live_transports()
    with pytest.raises(HostKeyError if refusal != "authentication" else ConnectError):
        transport_for("odd", NodeSpec(**entry)).open()
    for _ in range(50):
        if not _live_transports() - before:
            break
        time.sleep(0.1)
    assert not _live_transports() - before, "a refused connection was left open"


def test_a_command_timed_out_waiting_for_its_own_connection_leaves_the_shared_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 5: MaxSessions 1, its session held on the shared connection (the resident runner);
    a sibling's command must open a connection of its own, slowly (an sshd slow to log in), and
    its deadline passes meanwhile: that command times out, the shared connection stays up.
    (The watchdog's grace, 15 s, is shortened here: a 20 s command's wait for a connection of
    its own, its connect, banner and auth timeouts and OVERFLOW_WAIT, can pass 35 s.)"""
    from orchestrator.transport import ssh_watchdog

    monkeypatch.setattr(ssh_watchdog, "WATCHDOG_GRACE", 0.5)
    node = TunedNode("odd", tmp_path / "node", CARDS["t4"], {"MaxSessions": "1"})
    node.prepare()
    node.start()
    try:
        with transport_for("odd", NodeSpec(**node.farm_entry(tmp_path / "work"))) as transport:
            holder = transport.start("sleep 30")  # the connection's only session
            try:
                twin = transport.sibling()
                dial = twin._dial

                def slow_dial():
                    time.sleep(2.5)
                    return dial()

                twin._dial = slow_dial
                with pytest.raises(CommandTimeout):
                    twin.run("echo ok", timeout=1.0)
                twin.close()
                assert transport._conn.transport.is_active(), "the shared connection was closed"
                assert not holder._channel.closed, "the resident runner's channel was cut"
            finally:
                holder.close()
    finally:
        node.stop()


def test_a_second_outage_does_not_say_the_first_ones_error() -> None:
    """Finding 6, on NodeWork._await_node itself: the first outage's error, then the node back;
    the second outage's probes answer but their check fails: the first error is not given as why."""
    from types import SimpleNamespace

    from orchestrator.errors import InfraError
    from orchestrator.run.node_context import NodeContext
    from orchestrator.run.node_work import NodeWork

    said = iter([InfraError("node 'odd': cannot connect (the first outage)"), True, False, False, False])

    class Probe:
        def open(self) -> None:
            pass

        def run(self, command: str, *, timeout: float) -> SimpleNamespace:
            answer = next(said)
            if isinstance(answer, Exception):
                raise answer
            return SimpleNamespace(ok=answer, exit_code=0 if answer else 1, stdout="")

        def close(self) -> None:
            pass

    work = SimpleNamespace(
        farm=SimpleNamespace(spec=SimpleNamespace(reconnect_window=1.5)),
        stopping=None,
        _stopping=threading.Event(),  # never set: each back-off slept whole
        _transport=lambda name: Probe(),
        _open=lambda transport: transport.open(),
    )
    ctx = NodeContext(*([None] * 9))
    ctx.snapshot = SimpleNamespace(driver_evidence="")  # type: ignore[assignment] - the driver it had (none)
    assert NodeWork._await_node(work, ctx, "odd")  # type: ignore[arg-type]
    assert not NodeWork._await_node(work, ctx, "odd")  # type: ignore[arg-type]
    assert "the first outage" not in ctx.down_why, ctx.down_why


def test_a_known_hosts_that_could_not_be_read_while_the_node_was_away_is_waited_past() -> None:
    """Left undone by review 81, done after it: a known_hosts read that failed for a moment (EMFILE,
    an editor rewriting the file) during the reconnect wait ended the wait for the rest of the run
    as a refused key would; no key was refused, so the wait goes on, and the node back is used."""
    from types import SimpleNamespace

    from orchestrator.errors import KnownHostsUnreadable
    from orchestrator.run.node_context import NodeContext
    from orchestrator.run.node_work import NodeWork

    said = iter([KnownHostsUnreadable("node 'odd': cannot read its known_hosts (OSError: EMFILE)"), True])

    class Probe:
        def open(self) -> None:
            pass

        def run(self, command: str, *, timeout: float) -> SimpleNamespace:
            answer = next(said)
            if isinstance(answer, Exception):
                raise answer
            return SimpleNamespace(ok=answer, exit_code=0, stdout="")

        def close(self) -> None:
            pass

    work = SimpleNamespace(
        farm=SimpleNamespace(spec=SimpleNamespace(reconnect_window=5.0)),
        stopping=None,
        _stopping=threading.Event(),  # never set: each back-off slept whole
        _transport=lambda name: Probe(),
        _open=lambda transport: transport.open(),
    )
    ctx = NodeContext(*([None] * 9))
    ctx.snapshot = SimpleNamespace(driver_evidence="")  # type: ignore[assignment] - the driver it had (none)
    assert NodeWork._await_node(work, ctx, "odd")  # type: ignore[arg-type]
    assert not ctx.refused
