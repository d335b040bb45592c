"""Red-team round 199: network faults a real fleet meets, on real parts (a netns sshd node on a
veth pair; a host name the test controls through /etc/hosts bind-mounted in a mount namespace of
the farm's own).

Checked and found sound (no test here): see the README's "Network faults" notes and this round's
report."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm
from faults import NetnsNode, faults_job, faults_variant, run_in_background, started_netns_node, wait_for
from faults import write_fault_farm as write_farm
from nodes import query

NAME = "twoaddr.farm-test"  # the node's host name: only the farm's /etc/hosts knows it


@pytest.fixture
def netns_node(tmp_path: Path) -> Iterator[NetnsNode]:
    with started_netns_node("twoaddr", tmp_path / "node") as node:
        yield node


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"`ip {' '.join(args)}`: {done.stderr.strip()}"


def dead_address(node: NetnsNode) -> str:
    """An address whose SYNs vanish: routed to the node's namespace, which does not forward them
    (a stale A record, a host moved away). The route, and the farm-side source address that makes
    glibc keep it first (RFC 6724 rule 9 ties), go with the node's veth in its stop()."""
    base = node.host_addr.rsplit(".", 2)[0].replace("10.213", "10.214")
    subnet = node.host_addr.rsplit(".", 2)[1]
    source, dead = f"{base}.{subnet}.1", f"{base}.{subnet}.2"
    _ip("addr", "add", f"{source}/30", "dev", node.host_if)
    _ip("route", "add", f"{dead}/32", "via", node.node_addr, "dev", node.host_if, "src", source)
    return dead


def hosts_wrapper(tmp_path: Path, addresses: list[str]) -> tuple[list[str], list[str]]:
    """A command prefix that runs its command in a mount namespace whose /etc/hosts lists NAME at
    `addresses`, and the order getaddrinfo gives them there (glibc sorts them: RFC 6724)."""
    hosts = tmp_path / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + "".join(f"{a} {NAME}\n" for a in addresses))
    mount = 'mount --bind "$0" /etc/hosts && exec "$@"'
    wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(hosts)]
    look = f"import socket; print(' '.join(a[4][0] for a in socket.getaddrinfo({NAME!r}, 22, 0, 1)))"
    seen = subprocess.run([*wrapper, sys.executable, "-c", look], capture_output=True, text=True, check=False)
    assert sorted(seen.stdout.split()) == sorted(addresses), (seen.stdout, seen.stderr)
    return wrapper, seen.stdout.split()


def _verify(tmp_path: Path, node: NetnsNode, wrapper: list[str], connect_timeout: int) -> tuple[list, float]:
    with node.known_hosts.open("a") as known:
        known.write(f"[{NAME}]:{node.port} {node.host_public_key}\n")  # the name, as ssh writes it
    entry = node.farm_entry(tmp_path / "work", host=NAME, build_jobs=1, connect_timeout=connect_timeout)
    variant = faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=0")
    config = write_farm(tmp_path / "farm", {"two": entry}, [faults_job({"a": variant})], retries=0)
    clock = time.monotonic()
    done = farm("verify", "--all", "--no-report", "--config", str(config), cwd=tmp_path, wrapper=wrapper, timeout=60)
    took = time.monotonic() - clock
    rows = query(tmp_path / "farm" / "results.db", "SELECT * FROM results")
    assert rows, done.stdout + done.stderr
    return rows, took


def test_a_host_name_whose_first_address_times_out_is_reached_at_its_second(
    netns_node: NetnsNode, tmp_path: Path
) -> None:
    """Before: the node's host name resolving to a dead address first (its SYNs unanswered) and
    its live one second, every cell infra-error "cannot connect to NAME:PORT (TimeoutError:
    timed out)": paramiko's connect tries the next address only after a refusal or EHOSTUNREACH,
    where OpenSSH's ssh tries each in turn. Figure: 1 node, 1 cell, connect_timeout 3: a pass,
    in under 30 s."""
    dead = dead_address(netns_node)
    wrapper, order = hosts_wrapper(tmp_path, [dead, netns_node.node_addr])
    assert order == [dead, netns_node.node_addr], "the dead address must be the one tried first"
    rows, took = _verify(tmp_path, netns_node, wrapper, connect_timeout=3)
    assert [(r["variant"], r["outcome"]) for r in rows] == [("a", "pass")], [r["reason"] for r in rows]
    assert took < 30, f"the run took {took:.0f} s"


def test_a_host_name_none_of_whose_addresses_answers_names_each_and_what_it_said(
    netns_node: NetnsNode, tmp_path: Path
) -> None:
    """Before: a host name resolving to an address that refuses (nothing listens) and one that
    times out said only "cannot connect to NAME:PORT (TimeoutError: timed out)": not which
    addresses were tried, nor that one of them refused. Figure: both addresses in the reason,
    each with its answer ("Connection refused", "timed out after 2 s"); infra-error, no pass."""
    refusing = netns_node.host_addr  # the farm's own side of the veth: nothing listens on the port
    dead = dead_address(netns_node)
    wrapper, _ = hosts_wrapper(tmp_path, [dead, refusing])
    rows, _ = _verify(tmp_path, netns_node, wrapper, connect_timeout=2)
    assert [r["outcome"] for r in rows] == ["infra-error"], [dict(r) for r in rows]
    reason = rows[0]["reason"]
    assert f"{dead}:{netns_node.port}: timed out after 2 s" in reason, reason
    assert f"{refusing}:{netns_node.port}: Connection refused" in reason, reason


# the login's ~/.bashrc, for the resident runner's command alone: it says it started and waits for
# the test's word (a file, not the network), so the link breaks between the runner's start and its
# first message, every time
HOLD_RUNNER = """case "$BASH_EXECUTION_STRING" in
*" -I -S -c "*) : > "$HOME/runner-starting"; n=0
  while [ ! -e "$HOME/runner-go" ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n + 1)); done ;;
esac
"""


def test_a_node_cut_off_one_way_as_its_runner_starts_is_said_to_have_stopped_answering(
    netns_node: NetnsNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the node's packets to the farm dropped (a one-way partition: a route gone on the
    node's side) between its resident runner's start and its first message, every cell of the node
    infra-error "the resident runner did not answer within 60 s of its start: a login start-up
    file (~/.bashrc ...) may read stdin ...; make it return early", never retried (RunnerMute): the
    operator sent to a ~/.bashrc for a node that had stopped answering. Figure (START_LIMIT 10 s
    here, 60 s in a run): 1 node, 2 cells, retries 0: both infra-error at the probe, the reason
    saying the node stopped answering (its connection answered no keepalive), no word of stdin;
    the run over in under 35 s; no pass."""
    from orchestrator.run import resident

    monkeypatch.setattr(resident, "START_LIMIT", 10.0)
    (netns_node.home / ".bashrc").write_text(HOLD_RUNNER)
    variants = {name: faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=0") for name in ("a", "b")}
    entry = netns_node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3)
    config = write_farm(tmp_path / "farm", {"ow": entry}, [faults_job(variants)], retries=0, reconnect_window=0.0)
    clock = time.monotonic()
    thread, outcome, store = run_in_background(config, tmp_path)
    try:
        wait_for(lambda: (netns_node.home / "runner-starting").exists(), 20, "the resident runner's start")
        _ip("-n", netns_node.netns, "route", "add", "blackhole", f"{netns_node.host_addr}/32")
        (netns_node.home / "runner-go").touch()
        thread.join(60)
    finally:
        store.close()
    took = time.monotonic() - clock
    assert not thread.is_alive(), "the run did not end within 60 s of the partition"
    assert "error" not in outcome, outcome["error"]
    rows = query(tmp_path / "farm" / "results.db", "SELECT * FROM results")
    assert sorted(r["variant"] for r in rows) == ["a", "b"]
    for row in rows:
        assert (row["outcome"], row["failed_stage"]) == ("infra-error", "probe"), dict(row)
        assert "stopped answering" in row["reason"], row["reason"]
        assert "stdin" not in row["reason"], row["reason"]
    assert took < 35, f"the run took {took:.0f} s"
