"""Red-team round 45: cells the farm judged an expected refusal (or a pass) that did not earn it."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodes import Fleet, standin_job, standin_variant
from test_verdicts import EXACT90, rows, run


@pytest.mark.parametrize(
    "sent",
    [
        "{binary}; taskset -c 4095 {binary}",  # the kernel ran, exit 0; then a launcher failed
        "taskset -c 4095 {binary}; {binary}",  # a launcher failed; then the kernel ran, exit 0
    ],
)
def test_a_kernel_command_that_exits_0_on_a_card_it_must_refuse_is_no_refusal(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str, sent: str
) -> None:
    """A kernel without a gate (it runs on any card and passes) called twice, once through a
    launcher that fails before it starts the kernel (`taskset -c 4095`: "failed to set pid N's
    affinity: Invalid argument", exit 1), with a refusal marker those words match. The failing
    launcher's status was the run's first failing kernel status, its words on the kernel's stderr
    matched the refusal marker, and the copy had been read (by the other call, whose kernel ran on
    the card it must refuse and exited 0): the round-42 check that the binary was read passed, and
    the cell was an expected refusal. A kernel command that exits 0 ran the kernel on that card:
    no refusal, whatever another command printed."""
    variants = {"twice": standin_variant("NOGATE", EXACT90, "EXACT_CC=90", run=sent)}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    jobs = [standin_job("standin", variants, refusal_marker=r"(?i)invalid argument")]
    config = make_farm(tmp_path, nodes, jobs)
    _, summary = run(config)
    row = rows(tmp_path / "results.db", summary.run_id)[("twice", "Tesla T4")]
    assert row["outcome"] == "missing-refusal", row["reason"]


def test_a_kernel_status_of_0_beside_a_failing_one_is_no_refusal() -> None:
    """classify: statuses [0, 1] with the refusal text on stderr were an expected refusal."""
    from orchestrator.classify import Evidence, classify
    from orchestrator.outcomes import Outcome
    from orchestrator.plan import Expectation

    seen = {"build_exit": 0, "inspect_exit": 0, "run_exit": 1, "kernel_started": True, "kernel_exit": 1}
    must_refuse = Expectation(Outcome.EXPECTED_REFUSAL, "CC 7.5 is outside CC == 9.0")
    ran = classify(Evidence(**seen, refusal_line=1, kernel_exited_0=True), must_refuse)
    assert ran.outcome is Outcome.MISSING_REFUSAL, ran.reason
    gated = classify(Evidence(**seen, refusal_line=1), must_refuse)
    assert gated.outcome is Outcome.EXPECTED_REFUSAL, gated.reason
