"""Red-team round 76: speed as a night operator and a kernel author meet it. A metric's unit
edited in the job file (`unit: GFLOP/s` to `TFLOP/s`, the kernel printing the new unit) was
judged against the old unit's values: 0.1 TFLOP/s "100 % worse than the median 100" (GFLOP/s),
a red night, and in the other direction a real slowdown hidden until the old values left the
baseline. And a metric that stopped having a value (the kernel's line changed, the regex no
longer reads it) turned the speed check off in silence: the cron mail (`--quiet`, "what
changed") never said so, though the index lists it under "what changed". And a node whose
GPU the NVIDIA driver still holds (/proc/driver/nvidia/gpus) while nvidia-smi says "No devices
were found" (a card that failed to start: RmInitAdapter, off the bus) was taken for a machine
without a GPU: a green row of compile-only cells, exit 0, unless farm.yaml declared its `cc`."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, smi_on_path
from toyfarm import toy_farm

# the kernel prints the figure the test left in a file beside the farm: one build for every run
FIGURE_SOURCE = """\
#include <cstdio>
int main() {
    char figure[64] = "none";
    if (FILE* f = std::fopen("@FIGURE@", "r")) {
        if (std::fscanf(f, "%63s", figure) != 1) { figure[0] = 0; }
        std::fclose(f);
    }
    std::printf("toy: PASS\\nGFLOP/s: %s\\n", figure);
    return 0;
}
"""
GFLOPS = "metrics:\n  gflops: {regex: '^GFLOP/s: (\\S+)$', unit: GFLOP/s, better: higher, tolerance: 0.1}\n"


@pytest.fixture
def speedy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy farm on a local node with a stand-in T4 (it runs), its job with a gflops metric."""
    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path, source=FIGURE_SOURCE.replace("@FIGURE@", str(tmp_path / "figure.txt")))
    job = tmp_path / "jobs" / "toy.yaml"
    job.write_text(job.read_text() + GFLOPS)
    return config


def night(config: Path, figure: str, *flags: str) -> subprocess.CompletedProcess:
    (config.parent / "figure.txt").write_text(figure + "\n")
    return farm("verify", "--all", "--no-report", *flags, "--config", str(config))


def metric_rows(config: Path) -> list[sqlite3.Row]:
    with sqlite3.connect(config.parent / "results.db") as db:
        db.row_factory = sqlite3.Row
        return db.execute(
            "select m.*, r.outcome, r.reason from metric_values m join results r on r.id = m.result_id "
            "order by m.result_id"
        ).fetchall()


def test_a_metric_whose_unit_changed_is_not_judged_against_the_old_units_values(speedy: Path) -> None:
    """Five nights at ~100 GFLOP/s; then the author moves the metric to TFLOP/s (the kernel prints
    0.1, the same speed): the farm judged 0.1 against the median 100, "100 % worse", and the
    cell perf-regression, exit 1. The old unit's values are no baseline for the new one's."""
    for figure in ("100", "101", "99", "100", "102"):
        done = night(speedy, figure)
        assert done.returncode == 0, done.stdout + done.stderr
    job = speedy.parent / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("unit: GFLOP/s", "unit: TFLOP/s"))
    moved = night(speedy, "0.1")
    last = metric_rows(speedy)[-1]
    assert (last["unit"], last["value"]) == ("TFLOP/s", 0.1)
    assert last["outcome"] == "pass", last["reason"]
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert last["baseline"] is None and not last["regressed"]  # no value of its unit before it
    # and the other way: back in GFLOP/s, a real slowdown against the GFLOP/s values is one
    job.write_text(job.read_text().replace("unit: TFLOP/s", "unit: GFLOP/s"))
    slow = night(speedy, "50")
    last = metric_rows(speedy)[-1]
    assert last["outcome"] == "perf-regression" and slow.returncode == 1, last["reason"]
    assert "gflops 50 GFLOP/s is 50 % worse than the median 100 of its last 5" in last["reason"], last["reason"]


def test_the_cron_mail_says_when_a_metric_has_no_value(speedy: Path) -> None:
    """The kernel's figure line changed ("GFLOP/s: n/a"): the metric has no value, so its speed is
    judged no more; the index lists it under "what changed", but the `--quiet` mail, which is
    "what changed since the last run" for the operator, said nothing, exit 0."""
    first = night(speedy, "100", "--quiet")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "gflops" not in first.stdout  # a value: nothing to say
    lost = night(speedy, "n/a", "--quiet")
    assert lost.returncode == 0, lost.stdout + lost.stderr  # no value is not a failure
    said = [line for line in lost.stdout.splitlines() if "gflops" in line]
    assert len(said) == 1, lost.stdout
    assert said[0].startswith("no value: toy:plain@here") and 'not a plain number ("n/a")' in said[0], said


def test_a_gpu_the_driver_holds_but_nvidia_smi_cannot_list_is_no_machine_without_one(tmp_path: Path) -> None:
    """The probe as a node whose T4 failed to start answers it: nvidia-smi "No devices were found"
    (exit 6), the kernel driver loaded, and /proc/driver/nvidia/gpus still naming the board. The
    farm read a machine with a driver and no card, and ran the node compile-only: exit 0, every
    cell "as expected", for a GPU node whose card ran nothing."""
    from orchestrator.config.farm import load_farm
    from orchestrator.errors import NodeUnusable
    from orchestrator.run.node_setup import NodeSetup
    from orchestrator.run.probe import parse_probe

    node = load_farm(toy_farm(tmp_path)).spec.nodes["here"]  # declares no `cc`, as farm.yaml's `local`
    text = "\n".join(
        [
            "@@farm smi",
            "No devices were found",
            "rc=6",
            "@@farm driver",
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Jul  8 2025",
            "/dev/nvidiactl",
            "@@farm procgpus",
            "Model: \t\t Tesla T4",
            f"GPU UUID: \t {CARDS['t4'].uuid(0)}",
        ]
    )
    snapshot = parse_probe("here", node, text)
    assert not snapshot.has_gpu
    with pytest.raises(NodeUnusable) as refused:
        NodeSetup.check_usable("here", node, snapshot)
    said = str(refused.value)
    assert "No devices were found" in said and "Tesla T4" in said and "/proc/driver/nvidia/gpus" in said, said
    # a driver and no board (a build machine with the driver installed) is still a node without a GPU
    bare = parse_probe("here", node, text.split("@@farm procgpus")[0])
    NodeSetup.check_usable("here", node, bare)
