"""Red-team round 257: a kernel whose run leaves processes running after it printed its pass marker.

Broke (before/after): a kernel that exits 0 with its pass line while a process it started is still at
work (a forked child, a `setsid` daemon, a run's `helper &`) passed. The farm killed the process after
the kernel ended, and counted it only where it had left the kernel's process group (the FARM_CELL
marker's reap, the python runner's subreaper): a plain forked child died silently in the group kill,
with no word on the cell. Its own check may print FAIL a second later, or CUDA's error text, or keep
the card the next cell runs on: the farm never sees what it would have said, so the kernel's pass is
not backed. Now every process of the run still running when its commands ended is counted (the group
kill counts first, before the kill: a zombie is none) and the cell is judged as a run without evidence:
`fail` on a card it serves, `missing-refusal` on one it must refuse (a gate that refused but left a
process at work on that card refused nothing). A kernel's own failure stands as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

from nodes import Fleet, standin_variant
from test_node_runner import MIN75, verify

from orchestrator.classify import Evidence, classify
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation

MIN80 = {"min": "8.0"}  # the T4 (7.5) must be refused


def _prelude(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.sh"
    path.write_text(text)
    return path


def test_a_kernel_that_leaves_a_process_at_work_is_no_pass(ssh_fleet: Fleet, tmp_path: Path, runner: str) -> None:
    """Before: pass, with each runner, for a kernel whose forked child (in its process group) was still
    running, and for one whose `setsid` daemon was (only the daemon said "leftover processes killed").
    Figure: both `fail` with the count in the reason; a gate that refused a card it must refuse while its
    child ran on is `missing-refusal`; a kernel that leaves nothing still passes."""
    child = _prelude(tmp_path, "child", "( sleep 30; echo 'standin: FAIL (late)' ) &\n")
    daemon = _prelude(tmp_path, "daemon", "setsid sh -c 'sleep 30; echo standin: FAIL' </dev/null &\nsleep 0.5\n")
    variants = {
        "child": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=child),
        "daemon": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=daemon),
        "gate": standin_variant("PASS", MIN80, "MIN_CC=80", prelude=child),
        "clean": standin_variant("PASS", MIN75, "MIN_CC=75"),
        "refuses": standin_variant("PASS", MIN80, "MIN_CC=80"),
    }
    rows = {row["variant"]: row for row in verify(ssh_fleet, tmp_path / "farm", variants)}
    for name in ("child", "daemon"):
        row = rows[name]
        assert (row["outcome"], row["failed_stage"]) == ("fail", "run"), (name, row["reason"])
        assert "process(es) of the run were still running" in row["reason"], row["reason"]
        assert "leftover processes killed" in json.loads(row["stage_details"])["run"]["detail"], name
    gate = rows["gate"]
    assert (gate["outcome"], gate["failed_stage"]) == ("missing-refusal", "run"), gate["reason"]
    assert "still running" in gate["reason"], gate["reason"]
    assert rows["clean"]["outcome"] == "pass", rows["clean"]["reason"]
    assert rows["refuses"]["outcome"] == "expected-refusal", rows["refuses"]["reason"]


def test_a_run_helper_left_in_the_background_is_no_pass_either(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Before: pass for `sleep 30 & {binary}`, the helper killed unsaid. Figure: fail, one process
    counted: the farm cannot tell a run's helper at work from the kernel's."""
    variants = {"bg": standin_variant("PASS", MIN75, "MIN_CC=75", run="sleep 30 & {binary}")}
    (row,) = verify(ssh_fleet, tmp_path / "farm", variants)
    assert (row["outcome"], row["failed_stage"]) == ("fail", "run"), row["reason"]
    assert row["reason"].startswith("1 process(es) of the run were still running"), row["reason"]


def test_classify_judges_only_green_runs_by_their_leftovers() -> None:
    """classify: a pass and an expected refusal with leftovers are no evidence (fail, missing-refusal);
    a kernel's own failure keeps its reason; no leftover leaves the pass."""
    seen = {"build_exit": 0, "inspect_exit": 0, "run_exit": 0, "kernel_started": True, "kernel_exit": 0}
    serves, refuses = Expectation(Outcome.PASS, ""), Expectation(Outcome.EXPECTED_REFUSAL, "CC 7.5 < 8.0")
    passed = Evidence(**seen, pass_line=1, kernel_exited_0=True)
    assert classify(passed, serves).outcome is Outcome.PASS
    left = Evidence(**seen, pass_line=1, kernel_exited_0=True, run_leftover=2)
    verdict = classify(left, serves)
    assert (verdict.outcome, verdict.failed_stage) == (Outcome.FAIL, "run"), verdict
    assert verdict.reason.startswith("2 process(es) of the run were still running"), verdict.reason
    refused = {**seen, "run_exit": 1, "kernel_exit": 1}
    assert classify(Evidence(**refused, refusal_line=1), refuses).outcome is Outcome.EXPECTED_REFUSAL
    gate = classify(Evidence(**refused, refusal_line=1, run_leftover=1), refuses)
    assert gate.outcome is Outcome.MISSING_REFUSAL, gate
    failed = classify(Evidence(**refused, run_leftover=1), serves)
    assert failed.outcome is Outcome.FAIL and "still running" not in failed.reason, failed
