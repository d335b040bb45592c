"""Red-team round 263: a kernel that leaves processes at work under compute-sanitizer.

Round 257 made a run that left processes running no pass. The sanitize stage killed what a kernel
left under each tool (its group, the subreaper's orphans, the FARM_CELL marker's reap) but never
counted it: a kernel that passed under memcheck while a forked child (or a `setsid` daemon) kept
working was a clean sanitizer pass. What the child did on the card the tool never checked. Now each
tool's line on the node carries how many were left (both runners), the report keeps it, and a report
with leftovers is no clean bill: sanitizer-error, as the run's leftovers make no pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, install_sanitizer, query, standin_job, standin_variant

from orchestrator.classify import Evidence, classify
from orchestrator.classify.sanitizer_report import SanitizerReport
from orchestrator.config.farm import load_farm
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation, plan_cells
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store

MIN75 = {"min": "7.5"}
PASS = Expectation(Outcome.PASS, "a CC 7.5 card, contract CC >= 7.5", None, None)
PASSED = dict(build_exit=0, inspect_exit=0, run_exit=0, pass_line=2)
# preludes that leave a process at work only under the sanitizer stand-in (STANDIN_SANITIZER_TOOL
# set): the run itself leaves nothing, so its pass stands and the sanitizer's bill alone is judged
CHILD = "if [ -n \"${STANDIN_SANITIZER_TOOL-}\" ]; then ( sleep 30; echo 'standin: FAIL (late)' ) & fi\n"
DAEMON = (
    "if [ -n \"${STANDIN_SANITIZER_TOOL-}\" ]; then setsid sh -c 'sleep 30; echo standin: FAIL' "
    "</dev/null >/dev/null 2>&1 & sleep 0.5; fi\n"
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    nodes = Fleet(tmp_path_factory.mktemp("redteam263-fleet"))
    try:
        install_sanitizer(nodes.add("t4san", CARDS["t4"], start=False))
        nodes["t4san"].start()
        yield nodes
    finally:
        nodes.stop()


def _run(fleet: Fleet, make_farm, tmp_path: Path, variants: dict, runner: str, node: str = "t4san") -> dict:
    """The results, by variant, of a run of a stand-in job of VARIANTS on NODE of the fleet, by RUNNER."""
    entry = fleet[node].farm_entry(tmp_path / "work", build_jobs=1, runner=runner)
    farm = load_farm(make_farm(tmp_path, {node: entry}, [standin_job("standin", variants)]))
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
    finally:
        store.close()
    rows = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    return {r["variant"]: r for r in rows}


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_kernel_that_leaves_a_process_under_the_tool_gets_no_clean_bill(
    fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """Before: pass, with each runner, for a kernel whose forked child (in its group) or `setsid`
    daemon was still running when memcheck had ended with "0 errors": the farm killed it unsaid.
    Figure: sanitizer-error at sanitize, the count in the reason, the report and the stage's detail;
    the run itself (which left nothing) is not blamed; a kernel that leaves nothing still passes."""
    variants = {"clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"])}
    for name, text in (("child", CHILD), ("daemon", DAEMON)):
        prelude = tmp_path / f"{name}.sh"
        prelude.write_text(text)
        variants[name] = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude, sanitize=["memcheck"])
    rows = _run(fleet, make_farm, tmp_path, variants, runner)
    assert (rows["clean"]["outcome"], rows["clean"]["failed_stage"]) == ("pass", None), rows["clean"]["reason"]
    for name in ("child", "daemon"):
        row = rows[name]
        assert (row["outcome"], row["failed_stage"]) == ("sanitizer-error", "sanitize"), (name, row["reason"])
        assert "were still running when the tool had ended" in row["reason"], row["reason"]
        (memcheck,) = json.loads(row["sanitizer"])
        assert memcheck["leftover"] >= 1 and memcheck["errors"] == 0, memcheck
        details = json.loads(row["stage_details"])
        assert "leftover processes killed after it ended" in details["sanitize"]["detail"], details
        assert "leftover" not in details["run"]["detail"], details  # the run's own pass left nothing


def test_classify_takes_a_report_with_leftovers_for_no_clean_bill() -> None:
    """Before: SanitizerReport had no count of leftovers: 0 errors, exit 0 and the pass marker was clean.
    Figure: with one left it is not clean, and the cell is sanitizer-error, the kernel's doing, whatever
    else the tool said; without, pass."""
    clean = SanitizerReport("memcheck", 0, 0, passed=True, printed=True)
    assert clean.clean and classify(Evidence(**PASSED, sanitizer=(clean,)), PASS).outcome is Outcome.PASS
    for report in (
        SanitizerReport("memcheck", 0, 0, passed=True, printed=True, leftover=2),
        SanitizerReport("memcheck", 0, 0, passed=True, printed=True, unchecked="Error: ...", leftover=1),
    ):
        assert not report.clean
        verdict = classify(Evidence(**PASSED, sanitizer=(report,)), PASS)
        assert (verdict.outcome, verdict.failed_stage) == (Outcome.SANITIZER_ERROR, "sanitize"), verdict
        assert f"memcheck: {report.leftover} process(es) the program started" in verdict.reason, verdict.reason
