"""Red-team round 223: a node cut off one way while a command of its says nothing.

Red-team 201's test failed in CI now and then ("the run still going 150 s after the cut"): under
`runner: shell` a cell's build, look and run go out as one command whose budget is each stage's,
counted from when the farm hears the node start it. Cut as the node went from the look to the
kernel, before the kernel's start had reached the farm, the command still had the look's budget
(300 s and more) to wait on the dead connection (stacks dumped in a loop of reruns: the cell's
thread in ssh.py's recv, 120 s after the cut). A command silent for 15 s now has its connection
asked for a keepalive answer; one that gives none is closed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import NetnsNode, faults_job, faults_variant, run_in_background, started_netns_node, wait_for
from faults import write_fault_farm as write_farm
from nodes import processes_matching, query

from orchestrator.transport import ssh_liveness
from orchestrator.transport.base import ANSWER_WAIT


@pytest.fixture
def netns_node(tmp_path: Path) -> Iterator[NetnsNode]:
    with started_netns_node("silent", tmp_path / "node") as node:
        yield node


def test_a_node_cut_off_one_way_mid_look_is_known_gone_after_a_silence_not_the_looks_budget(
    netns_node: NetnsNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a cell whose look (its `inspect:` command, silent: its output goes to a file) was
    running when the node's route to the farm went: the run still going 150 s after the cut (the
    look's budget is 300 s and more). Figure: the run over within the silence (SILENCE_PROBE 5 s
    here, the farm's 15 s took 28 s of CI), the keepalive's wait, a 3 s dial and room for a loaded
    machine; the cell infra-error, saying the node stopped answering."""
    monkeypatch.setattr(ssh_liveness, "SILENCE_PROBE", 5.0)
    # no `instructions:` counted, so the look may be any command: this one naps, silent, before its dump
    variant = faults_variant(
        "SLOWPASS",
        {"min": "7.5"},
        "SLEEP_S=0",
        inspect="cp /bin/sleep {binary}.nap && {binary}.nap 40 && objdump -d {binary}",
    )
    del variant["instructions"]
    entry = netns_node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3, runner="shell")
    config = write_farm(
        tmp_path / "farm", {"cut": entry}, [faults_job({"nap": variant}, timeout=8)], retries=0, reconnect_window=2.0
    )
    thread, outcome, store = run_in_background(config, tmp_path)
    nap = re.compile(r"\.nap 40$")
    wait_for(lambda: any(nap.search(c) for _, c in processes_matching(str(tmp_path / "work"))), 60, "the look")
    cut = time.monotonic()
    netns_node.cut_one_way()
    thread.join(150)
    store.close()
    took = time.monotonic() - cut
    assert not thread.is_alive(), f"the run still going {took:.0f} s after the cut"
    assert "error" not in outcome, outcome
    assert took < ssh_liveness.SILENCE_PROBE + 1 + ANSWER_WAIT + 3 + 20, took
    rows = query(tmp_path / "farm" / "results.db", "SELECT * FROM results")
    assert [r["outcome"] for r in rows] == ["infra-error"], rows
    assert "stopped answering" in rows[0]["reason"], rows[0]["reason"]
    assert "said nothing for" in rows[0]["reason"], rows[0]["reason"]


def test_a_node_cut_off_one_way_as_a_bundle_uploads_is_known_gone_after_a_silence(
    netns_node: NetnsNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a bundle too big for a command's stdin (CUTLASS's headers; here every bundle, the
    limit patched to 0) goes by SFTP, whose waits have no timeout (its channel's open: an hour; each
    write's answer: as long as TCP retransmits, some 15 minutes): the node's route to the farm gone as
    the upload began (its SFTP channel open), the run still going 150 s after the cut. Figure: the run over within the
    silence, the keepalive's wait and room for a loaded machine; the cell infra-error, saying the
    upload's node stopped answering. The silence is 5 s here (SILENCE_PROBE, and the watchdog's grace
    that bounds it from below; 15 s each in a run, which took 20 s of CI)."""
    from orchestrator.run import staging
    from orchestrator.transport import ssh_watchdog
    from orchestrator.transport.ssh_files import SftpFiles

    monkeypatch.setattr(staging, "INLINE_BYTES", 0)
    monkeypatch.setattr(ssh_liveness, "SILENCE_PROBE", 5.0)
    monkeypatch.setattr(ssh_liveness, "WATCHDOG_GRACE", 5.0)
    monkeypatch.setattr(ssh_watchdog, "WATCHDOG_GRACE", 5.0)
    cut: list[float] = []
    upload = SftpFiles._put

    def put(self: SftpFiles, local: Path, remote: str) -> None:
        if not cut:
            self._sftp_client()  # its channel open: an open that meets the cut times out (connect_timeout)
            netns_node.cut_one_way()
            cut.append(time.monotonic())
        upload(self, local, remote)

    monkeypatch.setattr(SftpFiles, "_put", put)
    variant = faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=0")
    entry = netns_node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3, runner="shell")
    config = write_farm(
        tmp_path / "farm", {"cut": entry}, [faults_job({"up": variant}, timeout=8)], retries=0, reconnect_window=2.0
    )
    thread, outcome, store = run_in_background(config, tmp_path)
    wait_for(lambda: cut, 60, "the upload")
    thread.join(150)
    store.close()
    took = time.monotonic() - cut[0]
    assert not thread.is_alive(), f"the run still going {took:.0f} s after the cut"
    assert "error" not in outcome, outcome
    assert took < ssh_liveness.SILENCE_PROBE + ANSWER_WAIT + 3 + 20, took
    rows = query(tmp_path / "farm" / "results.db", "SELECT * FROM results")
    assert [r["outcome"] for r in rows] == ["infra-error"], rows
    assert "stopped answering" in rows[0]["reason"] and "upload" in rows[0]["reason"], rows[0]["reason"]


class _Packets:
    _Packetizer__received_packets = 0  # paramiko's packetizer's count, as ssh_liveness reads it


class _Link:
    """A connection as link_answers sees it: its keepalive's answer comes after `answer_after` s,
    packets arriving meanwhile where `busy` (a sibling's output on a slow link), none where not."""

    def __init__(self, answer_after: float, busy: bool) -> None:
        self.packetizer = _Packets()
        self.answer_after = answer_after
        self.busy = busy
        self.closed = False

    def is_active(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True

    def global_request(self, kind: str, wait: bool = True) -> bool:
        end = time.monotonic() + self.answer_after
        while time.monotonic() < end and not self.closed:
            time.sleep(0.1)
            self.packetizer._Packetizer__received_packets += 1 if self.busy else 0
        return True


@pytest.mark.parametrize(("busy", "alive"), [(True, True), (False, False)])
def test_a_keepalive_answer_queued_behind_a_busy_links_packets_is_waited_for(busy: bool, alive: bool) -> None:
    """Before: review 227 shaped a node's link to 1 Mbit/s while a sibling streamed output: the
    keepalive's answer took 4.3 s against the 5 s wait, and slower a healthy connection would be
    closed under the sibling (here: the answer after 3.5 s against a 1 s wait, closed). Figure:
    packets still coming while the answer is awaited keep the wait going: answered, left open; a
    link that receives nothing is still closed after one wait."""
    from orchestrator.transport.ssh_liveness import link_answers

    link = _Link(answer_after=3.5, busy=busy)
    clock = time.monotonic()
    answered = link_answers(link, timeout=1.0)  # type: ignore[arg-type]
    took = time.monotonic() - clock
    assert (answered, link.closed) == (alive, not alive), (answered, link.closed, took)
    assert took < (4.5 if alive else 1.5), took
