"""Red-team round 65: entries of farm.yaml's node registry the farm has not seen before:
node names the farm turns into one report page, and hosts written as ssh_config would."""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, query, standin_job, standin_variant
from test_verdicts import MIN75, run

FARM_YAML = """\
database: sqlite:///results.db
nodes:
{nodes}
"""


@pytest.mark.parametrize(
    ("nodes", "first", "second"),
    [
        # node h200's toolchain column `h200+cuda-13` and a node named h200_cuda-13: both nodes/h200_cuda-13.html
        (
            "  h200:\n    host: a.example.org\n    toolchains: {cuda-13: /usr/local/cuda/bin/nvcc}\n"
            "  h200_cuda-13:\n    host: b.example.org\n",
            "h200+cuda-13",
            "h200_cuda-13",
        ),
        # T4.html and t4.html: one file on a case-insensitive disk (macOS, a Windows share)
        ("  T4:\n    host: a.example.org\n  t4:\n    host: b.example.org\n", "T4", "t4"),
    ],
)
def test_node_names_that_share_a_page_are_refused(tmp_path: Path, nodes: str, first: str, second: str) -> None:
    """Two columns whose report pages are one file: the later page overwrote the earlier, and
    both columns' heads linked to it, the reviewers shown one node's probe under the other's
    name. farm.yaml is now refused, naming the node, its page and the name it shares it with."""
    from orchestrator.config.farm import load_farm
    from orchestrator.errors import ConfigError

    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.cu").write_text("int main() { return 0; }\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "k.yaml").write_text(
        "kernel: k\nsources: [kernels/k.cu]\npass_marker: PASS\nrefusal_marker: needs CC\nvariants:\n"
        "  v1:\n    build: '{nvcc} -o {binary} {sources}'\n    cc: {min: '7.5'}\n"
    )
    path = tmp_path / "farm.yaml"
    path.write_text(FARM_YAML.format(nodes=nodes.rstrip("\n")))
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    text = str(info.value)
    assert f"farm.yaml: nodes.{second.split('+')[0]}" in text, text
    assert f"{first!r}" in text and f"{second!r}" in text and ".html" in text, text


def _load_with_host(tmp_path: Path, host: str) -> str:
    """farm.yaml with one ssh node at `host`: the load's error text, or "" where it loads."""
    import yaml

    from orchestrator.config.farm import load_farm
    from orchestrator.errors import ConfigError

    (tmp_path / "kernels").mkdir(exist_ok=True)
    (tmp_path / "kernels" / "k.cu").write_text("int main() { return 0; }\n")
    (tmp_path / "jobs").mkdir(exist_ok=True)
    (tmp_path / "jobs" / "k.yaml").write_text(
        "kernel: k\nsources: [kernels/k.cu]\npass_marker: PASS\nrefusal_marker: needs CC\nvariants:\n"
        "  v1:\n    build: '{nvcc} -o {binary} {sources}'\n    cc: {min: '7.5'}\n"
    )
    path = tmp_path / "farm.yaml"
    path.write_text(yaml.safe_dump({"nodes": {"gpu1": {"host": host, "port": 2222}}}))
    try:
        load_farm(path)
    except ConfigError as err:
        return str(err)
    return ""


@pytest.mark.parametrize(
    "host",
    ["h200.example.org:2222", "farm@h200.example.org", "ssh://h200.example.org", "[::1]", "h200 ", "h200\tb"],
)
def test_a_host_that_is_no_host_name_is_refused_at_load(tmp_path: Path, host: str) -> None:
    """`host` took any text: a port, a login or a URL written into it (ssh_config's habits), or
    brackets around an IPv6 address, loaded, and every cell of the node was infra-error "could
    not resolve" run after run. The load now names the key and what belongs there."""
    text = _load_with_host(tmp_path, host)
    assert "farm.yaml: nodes.gpu1.host" in text and "port" in text and "user" in text, text


@pytest.mark.parametrize("host", ["h200.example.org", "h200.example.org.", "::1", "127.0.0.1", "GPU-Node_1", "fe80::1"])
def test_host_names_and_addresses_still_load(tmp_path: Path, host: str) -> None:
    assert _load_with_host(tmp_path, host) == ""


def spans_of(log: Path) -> dict[str, list[tuple[int, int]]]:
    """Each GPU's (start, end) intervals, from the kernels' own log lines."""
    opened: dict[str, list[int]] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    for line in log.read_text().splitlines():
        word, clock, gpu = line.split()
        if word == "start":
            opened.setdefault(gpu, []).append(int(clock))
        else:
            spans.setdefault(gpu, []).append((opened[gpu].pop(0), int(clock)))
    return spans


def test_one_card_under_two_node_names_is_run_and_certified_once(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The t4 machine listed twice (`t4` and `t4-again`, the same sshd, each its own work folder):
    each name's cells ran on the one card at once (each folder its own GPU lock file), their
    timings measured two kernels sharing it, and the matrix showed two passing "nodes" for one
    card. The probe reads each card's UUID: a card another node of the run has is now run by
    that node only, and the other name's cells are infra-error naming the node that has it."""
    log = Path("/dev/shm") / f"farm-test-rt65-{os.getpid()}-{tmp_path.name}.log"
    request.addfinalizer(lambda: log.unlink(missing_ok=True))
    run_line = (
        f'echo "start $(date +%s%N) $CUDA_VISIBLE_DEVICES" >> {log}; sleep 0.3; {{binary}}; rc=$?; '
        f'echo "end $(date +%s%N) $CUDA_VISIBLE_DEVICES" >> {log}; exit $rc'
    )
    variants = {f"v{i}": standin_variant("PASS", MIN75, "MIN_CC=75", run=run_line) for i in range(3)}
    t4 = ssh_fleet["t4"]
    nodes = {"t4": t4.farm_entry(tmp_path / "work-a"), "t4-again": t4.farm_entry(tmp_path / "work-b")}
    config = make_farm(tmp_path / "farm", nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    found = query(tmp_path / "farm" / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    passed = {r["node"] for r in found if r["outcome"] == "pass"}
    assert len(passed) == 1, [(r["node"], r["outcome"], r["reason"]) for r in found]
    (runner,) = passed
    other = ({"t4", "t4-again"} - passed).pop()
    refused = [r for r in found if r["node"] == other]
    assert len(refused) == 3 and all(r["outcome"] == "infra-error" for r in refused), refused
    for r in refused:
        assert t4.cards[0].uuid(0) in r["reason"] and repr(runner) in r["reason"], r["reason"]
    spans = spans_of(log)
    assert sum(len(v) for v in spans.values()) == 3, spans
    for intervals in spans.values():
        intervals.sort()
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start >= end, f"two kernels at once on one card: {intervals}"


def test_one_card_behind_two_sshds_in_two_worker_processes_is_run_once(make_farm, tmp_path: Path) -> None:
    """The same machine through two sshds (two ports, or a name and its address): each its own
    group, so with `processes: 2` each name went to a worker process of its own, where no claim
    of the other's could be seen. Claims are made in the parent: one name runs the card."""
    fleet = Fleet(tmp_path / "fleet")
    try:
        same = dataclasses.replace(CARDS["t4"], salt="one machine")  # the same card: the same UUID
        first = fleet.add("port-a", same)
        second = fleet.add("port-b", same)
        nodes = {"a": first.farm_entry(tmp_path / "work-a"), "b": second.farm_entry(tmp_path / "work-b")}
        variants = {"v": standin_variant("PASS", MIN75, "MIN_CC=75")}
        config = make_farm(tmp_path / "farm", nodes, [standin_job("standin", variants)], processes=2)
        _, summary = run(config)
    finally:
        fleet.stop()
    by_node = {
        r["node"]: (r["outcome"], r["reason"] or "")
        for r in query(tmp_path / "farm" / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    }
    assert sorted(o for o, _ in by_node.values()) == ["infra-error", "pass"], by_node
    (refused,) = [why for o, why in by_node.values() if o == "infra-error"]
    assert same.uuid(0) in refused and "card too" in refused, refused


FARM_YAML = """\
database: sqlite:///results.db
nodes:
{nodes}
"""
