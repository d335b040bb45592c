"""Red-team round 80: SSH servers and known_hosts files as real sites keep them.

Findings:

1. A known_hosts with a `@cert-authority` line (a site's host CA), or any line paramiko cannot
   parse (a key type it lacks, a truncated key), made every cell of the node infra-error
   "internal error in the farm (InvalidHostKey: ...); please report it", a traceback on
   stderr, though the node's own key was listed on the next line and OpenSSH connects.
2. A `@revoked` line (OpenSSH: "must not ever be accepted") did the same: the farm's checking
   never read it. Loaded past the crash, paramiko would accept a revoked key listed plainly too.
3. A host listed with two keys of one type (a key rotation in progress, one name for an HA
   pair) was refused as "a man-in-the-middle, or the host was reinstalled" whenever its key
   was the second line: paramiko compares only the first key of each type. OpenSSH accepts
   any listed key.
4. Under sshd's `MaxSessions 1` (or 2) the resident runner's channel left no room for the look
   at the node after a failed run (its disk, its card: one more channel, refused "no more
   sessions", read as "the node cannot say"): a card lost mid-run was judged the kernel's
   `fail`. A thread whose channel sshd refuses now opens a connection of its own.
5. A node whose sshd came back mid-run with another host key was tried for the whole
   reconnect_window (60 s here) and its cells said "unreachable", the changed key (a possible
   man-in-the-middle) unsaid. It is now refused at once, its cells naming both keys.
6. No key_file, an agent of several keys, sshd's `MaxAuthTries 1`: "cannot connect (SSHException:
   No existing session)", as for a node that is down. It now says authentication, MaxAuthTries
   and key_file.

The farm now reads known_hosts itself (transport/known_hosts.py): markers, hashed names,
patterns, bad lines skipped as OpenSSH does, a revoked key refused for every node.

Checked and sound (short runs, resident and shell runners): ClientAliveInterval 1 with
ClientAliveCountMax 1, no sftp Subsystem, a Banner, PermitTTY no, DisableForwarding yes,
MaxAuthTries 1, LoginGraceTime 1, MaxStartups 1:100:1, a hashed known_hosts.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from faults import TunedNode
from nodes import CARDS, SSH_KEYGEN, SshNode, fingerprint, lose_card_after_probe, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

VARIANTS = {
    "a-pass": standin_variant("PASS", MIN75, "MIN_CC=75"),
    "b-fail": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
}


def other_key(folder: Path) -> str:
    """Another ed25519 public key ("ssh-ed25519 AAAA..."), no node's."""
    path = folder / "other_ed25519"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, capture_output=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def outcomes(make_farm, tmp_path: Path, node: SshNode) -> dict[str, tuple[str, str]]:
    entry = node.farm_entry(tmp_path / "work", runner="auto")
    config = make_farm(tmp_path / "farm", {"odd": entry}, [standin_job("standin", VARIANTS)])
    _, summary = run(config)
    found = rows(tmp_path / "farm" / "results.db", summary.run_id)
    return {variant: (row["outcome"], row["reason"] or "") for (variant, _), row in found.items()}


@pytest.fixture
def node(tmp_path: Path):
    made = SshNode("odd", tmp_path / "node", CARDS["t4"])
    made.prepare()
    made.start()
    yield made
    made.stop()


@pytest.mark.parametrize(
    "extra",
    [
        "@cert-authority *.example.org {other}",  # a site's host CA
        "@cert-authority {name} {other}",  # ... naming this very host
        "gpu7.example.org sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29tAAAA",
        "gpu8.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDMk+t7",  # a truncated line
    ],
)
def test_known_hosts_lines_the_farm_does_not_use_leave_the_node_known(
    node: SshNode, make_farm, tmp_path: Path, extra: str
) -> None:
    """OpenSSH connects with such a file (it skips what it cannot use); the farm said "internal
    error in the farm (InvalidHostKey ...)" for every cell, its own key line right below."""
    line = extra.format(other=other_key(tmp_path), name=node.known_hosts_name)
    node.known_hosts.write_text(f"{line}\n{node.known_hosts_line()}\n")
    found = outcomes(make_farm, tmp_path, node)
    assert found["a-pass"][0] == "pass", found
    assert found["b-fail"][0] == "fail", found


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_revoked_host_key_is_refused(node: SshNode, make_farm, tmp_path: Path, where: str) -> None:
    """`@revoked` says the key must never be accepted, even where a plain line lists it too (a
    stolen key, still in the file of an operator who has not cleaned up). The farm made it an
    internal error; it is now infra-error naming the node, the key and the line."""
    revoked = f"@revoked {node.known_hosts_line()}"
    lines = [revoked, node.known_hosts_line()] if where == "before" else [node.known_hosts_line(), revoked]
    node.known_hosts.write_text("\n".join(lines) + "\n")
    found = outcomes(make_farm, tmp_path, node)
    for outcome, reason in found.values():
        assert outcome == "infra-error", found
        assert "internal error" not in reason, reason
        assert "'odd'" in reason and "@revoked" in reason and node.host_fingerprint in reason, reason
        assert str(node.known_hosts) in reason, reason
    assert not (tmp_path / "work").exists(), "nothing may run on a host whose key is revoked"


def test_a_host_listed_with_two_keys_of_one_type_is_known_by_either(node: SshNode, make_farm, tmp_path: Path) -> None:
    """Two ed25519 keys for one name, the node's second: OpenSSH accepts it; the farm refused it
    as "a man-in-the-middle, or the host was reinstalled"."""
    first = other_key(tmp_path)
    node.known_hosts.write_text(f"{node.known_hosts_line(first)}\n{node.known_hosts_line()}\n")
    found = outcomes(make_farm, tmp_path, node)
    assert found["a-pass"][0] == "pass", found
    assert found["b-fail"][0] == "fail", found


def test_a_changed_key_is_still_refused_with_both_fingerprints(node: SshNode, make_farm, tmp_path: Path) -> None:
    """The other side of finding 3: a host listed with keys that are none of the one it offers
    stays refused, naming what it offered and what the file holds."""
    first = other_key(tmp_path)
    node.known_hosts.write_text(f"{node.known_hosts_line(first)}\n")
    found = outcomes(make_farm, tmp_path, node)
    for outcome, reason in found.values():
        assert outcome == "infra-error", found
        assert node.host_fingerprint in reason and fingerprint(first) in reason, reason
        assert "man-in-the-middle" in reason, reason


def test_known_hosts_names_are_matched_as_openssh_matches_them(tmp_path: Path) -> None:
    """Hashed names (`ssh-keygen -H`), comma lists, `*`/`?` patterns and `!` negations, `[host]:port`
    literal (its brackets no character class); bad lines and unknown markers skipped."""
    from orchestrator.transport import known_hosts

    key = other_key(tmp_path)
    path = tmp_path / "known_hosts"
    path.write_text(f"[gpu1.site.net]:2222 {key}\n")
    subprocess.run([SSH_KEYGEN, "-H", "-f", str(path)], check=True, capture_output=True)
    assert path.read_text().startswith("|1|")
    with path.open("a") as out:
        out.write(f"# a comment\n\n*.example.org,!bastion.example.org {key}\n@marker gpu3 {key}\n")
        out.write("gpu4 ssh-ed25519 !!!notbase64\n")
    known = known_hosts.load(str(path))
    assert known.listed("[gpu1.site.net]:2222") and not known.listed("gpu1.site.net")
    assert not known.listed("[gpu1.site.net]:2223")
    assert known.listed("GPU9.example.org") and not known.listed("bastion.example.org")
    assert not known.listed("gpu3") and not known.listed("gpu4") and not known.listed("example.org")
    assert known.algorithms("[gpu1.site.net]:2222") == {"ssh-ed25519"}
    assert known_hosts.load(str(tmp_path / "absent")).entries == []


@pytest.mark.parametrize("sessions", ["1", "2"])
def test_a_card_lost_on_a_node_of_few_sessions_is_still_the_nodes_fault(
    make_farm, tmp_path: Path, sessions: str
) -> None:
    """sshd's `MaxSessions 1` (or 2: sites set it low): the resident runner holds a channel for the
    whole run, and the look at the node after a failed run (its disk's room, its card: one more
    channel) was refused, "no more sessions", taken as "the node cannot say". A card lost mid-run
    (nvidia-smi: "No devices were found") then failed the kernel: verdict `fail`, where on any
    other node it is infra-error."""
    node = TunedNode("odd", tmp_path / "node", CARDS["t4"], {"MaxSessions": sessions})
    node.prepare()
    lose_card_after_probe(node.node_bin, tmp_path / "probed")
    node.start()
    try:
        found = outcomes(make_farm, tmp_path, node)
    finally:
        node.stop()
    for outcome, reason in found.values():
        assert outcome == "infra-error", found
        assert "the node lost the cell's GPU" in reason and "No devices were found" in reason, reason


def test_a_node_back_with_another_host_key_is_refused_not_rerun(tmp_path: Path) -> None:
    """The node drops mid-run and its sshd comes back on the same port with a new host key (a
    reinstall, or someone else's sshd on that address): the farm waits for it within
    reconnect_window as for a reboot, but the reconnection must be refused, nothing rerun
    there, its cells infra-error naming the node and both fingerprints, and the run not green."""
    from faults import faults_job, faults_variant, signal_pids, sshd_tree, wait_for
    from faults import write_fault_farm as write_farm
    from test_faults import kernel_running, results, run_farm

    from orchestrator.errors import EXIT_OK

    node = SshNode("rekeyed", tmp_path / "node", CARDS["t4"])
    node.prepare()
    old = node.host_fingerprint
    node.start()
    workdir = tmp_path / "work"
    variants = {
        "slow": faults_variant("SLOWPASS", MIN75, "SLEEP_S=3", timeout=60),
        "after": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
    }
    entry = node.farm_entry(workdir, build_jobs=1, connect_timeout=2)
    config = write_farm(tmp_path, {"rekeyed": entry}, [faults_job(variants)], reconnect_window=60.0, retries=1)
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(run=run_farm(config)), daemon=True)
    try:
        thread.start()
        wait_for(lambda: kernel_running(workdir, "rekeyed", "slow") or not thread.is_alive(), 60, "the slow kernel")
        signal_pids(sshd_tree(node), signal.SIGKILL)
        assert node.proc is not None
        node.proc.wait()
        for path in (node.host_key, node.host_key.with_suffix(".pub")):
            path.unlink()
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(node.host_key)], check=True)
        node.start()
        thread.join(timeout=120)
        assert not thread.is_alive(), "the farm never finished"
    finally:
        node.stop()
    summary, _ = outcome["run"]  # type: ignore[misc]
    found = results(tmp_path / "results.db", summary.run_id)
    for row in found.values():
        assert row["outcome"] == "infra-error", found
        assert "'rekeyed'" in row["reason"] and old in row["reason"], row["reason"]
        assert node.host_fingerprint in row["reason"], row["reason"]
    assert summary.exit_code != EXIT_OK


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An ssh-agent of the test's own (SSH_AUTH_SOCK set); `add(key)` loads a key into it."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
    for _ in range(100):
        if sock.exists():
            break
        time.sleep(0.05)

    def add(key: Path) -> None:
        subprocess.run(["ssh-add", "-q", str(key)], check=True, capture_output=True)

    yield add
    proc.terminate()
    proc.wait(timeout=10)


def test_an_agent_of_several_keys_past_max_auth_tries_is_told_so(agent, make_farm, tmp_path: Path) -> None:
    """No key_file: the agent's keys are offered, the node's second. Under sshd's `MaxAuthTries
    1` sshd drops the connection after the first, and the farm said "cannot connect to
    127.0.0.1:PORT (SSHException: No existing session)", as for a node down; it was
    authentication, and the way out is the node's own key in key_file."""
    node = TunedNode("odd", tmp_path / "node", CARDS["t4"], {"MaxAuthTries": "1"})
    node.prepare()
    node.start()
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k1")], check=True)
    agent(tmp_path / "k1")
    agent(node.client_key)
    try:
        entry = node.farm_entry(tmp_path / "work")
        del entry["key_file"]
        config = make_farm(tmp_path / "farm", {"odd": entry}, [standin_job("standin", VARIANTS)], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    for row in rows(tmp_path / "farm" / "results.db", summary.run_id).values():
        reason = row["reason"]
        assert row["outcome"] == "infra-error", reason
        assert "'odd'" in reason and "authentication" in reason and "MaxAuthTries" in reason, reason
        assert "key_file" in reason, reason


def test_each_command_a_full_sshd_refuses_goes_on_the_threads_own_connection(tmp_path: Path) -> None:
    """sshd's `MaxSessions 1`, its one channel held by a long command: every later command of a
    sibling (a worker thread sharing the connection) goes on that thread's own connection, opened
    once; the second had been refused as a lost session once the first had opened it (review)."""
    from orchestrator.config.farm_spec import NodeSpec
    from orchestrator.transport import transport_for

    node = TunedNode("odd", tmp_path / "node", CARDS["t4"], {"MaxSessions": "1"})
    node.prepare()
    node.start()
    try:
        with transport_for("odd", NodeSpec(**node.farm_entry(tmp_path / "work"))) as transport:
            holder = transport.start("sleep 30")  # the connection's only session
            try:
                twin = transport.sibling()
                said = [twin.run(f"echo {n}", timeout=30).stdout.strip() for n in range(3)]
                assert said == ["0", "1", "2"]
                twin.close()
            finally:
                holder.close()
    finally:
        node.stop()
