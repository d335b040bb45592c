"""Review 243: what a sanitize stage's clean bill rests on.

A tool's "0 errors" says nothing of a kernel it never ran, or ran past its work: the kernel's
own pass marker under the tool is read now (its stdout there, beside the tool's log), and the
tool's own words (its stderr, its log's errors) are on the cell where it failed. The nodes are
real sshd nodes with a stand-in T4 (tests/nodes.py); each odd compute-sanitizer is a script
written here and named as the node's `compute_sanitizer`.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, install_sanitizer, query, standin_job, standin_variant

from orchestrator.classify import Evidence, classify
from orchestrator.classify.sanitizer_report import SanitizerReport
from orchestrator.config.farm import load_farm
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation, plan_cells
from orchestrator.report.site import render
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store

MIN75 = {"min": "7.5"}
PASS = Expectation(Outcome.PASS, "a CC 7.5 card, contract CC >= 7.5", None, None)
PASSED = dict(build_exit=0, inspect_exit=0, run_exit=0, pass_line=2)

# the tool's options, as the stand-in reads them (tests/nodes.py SANITIZER_STANDIN)
_OPTIONS = """tool=memcheck; log=
while [ $# -gt 0 ]; do
    case "$1" in
        --tool) tool=$2; shift 2 ;;
        --error-exitcode|--print-limit) shift 2 ;;
        --log-file) log=$2; shift 2 ;;
        --*) shift ;;
        *) break ;;
    esac
done
"""
# v12.4's wheel (2024.1.0): its banner and "0 errors", exit 0, the binary never executed
NEVER_RUNS = (
    "#!/bin/sh\n"
    + _OPTIONS
    + ('printf "========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors\\n" > "$log"\nexit 0\n')
)
# a tool without its injection library: the program runs (and passes) uninstrumented
UNINSTRUMENTED = (
    "#!/bin/sh\n"
    + _OPTIONS
    + (
        '"$@"; rc=$?\n'
        'printf "========= COMPUTE-SANITIZER\\n========= Error: Target application terminated before first '
        'instrumented API call\\n========= ERROR SUMMARY: 0 errors\\n" > "$log"\nexit $rc\n'
    )
)
# an option it does not know: said on its stderr, no log written
BAD_OPTION = "#!/bin/sh\necho \"Unrecognized option '--print-limit'\" >&2\nexit 1\n"
# a tool that cannot serve this card: its banner and its error, no summary, its own exit
UNSUPPORTED = (
    "#!/bin/sh\n"
    + _OPTIONS
    + (
        'printf "========= COMPUTE-SANITIZER\\n========= Error: racecheck is not supported on this device\\n" '
        '> "$log"\n'
        'echo "compute-sanitizer: tool initialisation failed" >&2\nexit 1\n'
    )
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    nodes = Fleet(tmp_path_factory.mktemp("review243-fleet"))
    try:
        install_sanitizer(nodes.add("t4san", CARDS["t4"], start=False))
        nodes["t4san"].start()
        yield nodes
    finally:
        nodes.stop()


def _run(fleet, make_farm, tmp_path: Path, variants: dict, tool: str | None = None, runner: str = "auto"):
    entry = fleet["t4san"].farm_entry(tmp_path / "work", build_jobs=1, runner=runner)
    if tool is not None:
        path = tmp_path / "compute-sanitizer"
        path.write_text(tool)
        path.chmod(0o755)
        entry["compute_sanitizer"] = str(path)
    farm = load_farm(make_farm(tmp_path, {"t4san": entry}, [standin_job("standin", variants)]))
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
    finally:
        store.close()
    rows = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    return summary, {r["variant"]: r for r in rows}


def _said(row: sqlite3.Row) -> tuple[str, str | None]:
    return row["outcome"], row["failed_stage"]


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_kernel_that_skips_its_check_under_the_tool_is_no_pass(fleet, make_farm, tmp_path: Path, runner) -> None:
    """Before: a kernel that passed its run, then under memcheck ended 0 before its pass line
    ("standin: check skipped"), was `pass` with memcheck's "0 errors": the tool checked a run that
    did no work. Figure: sanitizer-error, the reason saying the pass marker was not printed under
    the tool and quoting the kernel's last line there (and the cell page, beside the tool's count);
    a kernel that passes under it stays pass."""
    variants = {
        "skips": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"]),
        "clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"]),
    }
    variants["skips"]["build"] = str(variants["skips"]["build"]).replace(
        "-DMODE_PASS", "-DMODE_PASS -DQUIET_UNDER='\"memcheck\"'"
    )
    summary, rows = _run(fleet, make_farm, tmp_path, variants, runner=runner)
    assert _said(rows["clean"]) == ("pass", None), rows["clean"]["reason"]
    skips = rows["skips"]
    assert _said(skips) == ("sanitizer-error", "sanitize"), skips["reason"]
    assert "without its pass marker" in skips["reason"] and "standin: check skipped" in skips["reason"]
    (memcheck,) = json.loads(skips["sanitizer"])
    assert memcheck["passed"] is False and memcheck["errors"] == 0
    assert summary.exit_code == 1
    # the cell page says it beside the tool's "0 errors", flagged
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        render(store, tmp_path / "site")
    finally:
        store.close()
    page = (tmp_path / "site" / "cells" / f"{skips['id']}.html").read_text()
    assert 'data-under="memcheck"' in page and "No pass marker on the kernel&#x27;s stdout" in page
    assert "standin: check skipped" in page


def test_a_self_check_that_fails_under_the_tool_is_quoted(fleet, make_farm, tmp_path: Path) -> None:
    """Before: a kernel whose self-check failed under racecheck (exit 1, its mismatch on stderr)
    with the tool's "0 errors" was sanitizer-error "the program exit 1 under it", the kernel's words
    dropped with its streams. Figure: still sanitizer-error, its stderr's last line in the reason."""
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck", "racecheck"])
    variant["build"] = str(variant["build"]).replace("-DMODE_PASS", "-DMODE_PASS -DFAIL_UNDER='\"racecheck\"'")
    _, rows = _run(fleet, make_farm, tmp_path, {"fails": variant})
    row = rows["fails"]
    assert _said(row) == ("sanitizer-error", "sanitize"), row["reason"]
    assert "racecheck: the program exit 1 under it" in row["reason"]
    assert "mismatch at element 5 under the tool" in row["reason"]


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_tool_that_never_ran_the_kernel_gives_no_clean_bill(fleet, make_farm, tmp_path: Path, runner) -> None:
    """Before: a compute-sanitizer that printed its banner and "ERROR SUMMARY: 0 errors" and exited
    0 without executing the binary (CUDA 12.4's wheel does) made the cell `pass`. Figure:
    infra-error at sanitize: the kernel printed nothing under the tool, which may never have started
    it, so its 0 errors are no evidence (the tool's trouble, not the kernel's)."""
    variants = {"clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"])}
    summary, rows = _run(fleet, make_farm, tmp_path, variants, NEVER_RUNS, runner)
    row = rows["clean"]
    assert _said(row) == ("infra-error", "sanitize"), row["reason"]
    assert "printed nothing" in row["reason"] and "memcheck" in row["reason"]
    assert summary.exit_code == 4


def test_a_tool_that_instrumented_nothing_gives_no_clean_bill(fleet, make_farm, tmp_path: Path) -> None:
    """Before: a tool that ran the kernel uninstrumented (it passed) and said "Target application
    terminated before first instrumented API call" above its "0 errors" made the cell `pass`.
    Figure: infra-error at sanitize, the tool's line quoted."""
    variants = {"clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"])}
    _, rows = _run(fleet, make_farm, tmp_path, variants, UNINSTRUMENTED)
    row = rows["clean"]
    assert _said(row) == ("infra-error", "sanitize"), row["reason"]
    assert "terminated before first instrumented API call" in row["reason"]


@pytest.mark.parametrize("tool, words", [(BAD_OPTION, "Unrecognized option"), (UNSUPPORTED, "not supported")])
def test_the_tools_own_failure_is_the_tools_and_says_its_words(fleet, make_farm, tmp_path: Path, tool, words) -> None:
    """Before: a compute-sanitizer that refused an option (on its stderr, no log) was infra-error
    with "log: ''", its words dropped; one that printed its banner and "not supported on this
    device" and exited 1 without a summary was the kernel's sanitizer-error ("the check did not
    finish"). Figure: both infra-error at sanitize, their own words in the reason."""
    variants = {"clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["racecheck"])}
    _, rows = _run(fleet, make_farm, tmp_path, variants, tool)
    row = rows["clean"]
    assert _said(row) == ("infra-error", "sanitize"), row["reason"]
    assert words in row["reason"]
    if tool is UNSUPPORTED:
        assert "tool initialisation failed" in row["reason"]


def test_classify_wants_the_pass_marker_under_the_tool() -> None:
    """Before: a report of 0 errors and exit 0 was clean whatever the kernel printed under the tool.
    Figure: without its pass marker there it is sanitizer-error where the kernel printed something,
    infra-error where it printed nothing; with it (or where it was not read: older rows), pass."""
    rows = [
        (SanitizerReport("memcheck", 0, 0, passed=True, printed=True), Outcome.PASS),
        (SanitizerReport("memcheck", 0, 0), Outcome.PASS),
        (SanitizerReport("memcheck", 0, 0, passed=False, printed=True, last_line="skipped"), Outcome.SANITIZER_ERROR),
        (SanitizerReport("memcheck", 0, 0, passed=False, printed=False), Outcome.INFRA_ERROR),
        (SanitizerReport("memcheck", 3, 0, passed=False, printed=False, said="boom"), Outcome.INFRA_ERROR),
        (SanitizerReport("memcheck", 139, 0, passed=False, printed=False), Outcome.SANITIZER_ERROR),  # a crash
        (SanitizerReport("memcheck", 86, 2, passed=False, printed=False), Outcome.SANITIZER_ERROR),  # its findings
        (SanitizerReport("memcheck", 0, 0, passed=True, printed=True, unchecked="Error: ..."), Outcome.INFRA_ERROR),
    ]
    for report, outcome in rows:
        verdict = classify(Evidence(**PASSED, sanitizer=(report,)), PASS)
        assert verdict.outcome is outcome, (report, verdict)
        assert (verdict.failed_stage == "sanitize") is (outcome is not Outcome.PASS), verdict
        assert report.clean is (outcome is Outcome.PASS)
