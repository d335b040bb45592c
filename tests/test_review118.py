"""Review round 118: rounds 115-117 read against what a kernel or a job can do to its own cell.

Round 116 made a cell whose run files were gone when its run ended infra-error, retried, counted
against the node's health; and a failed build or run whose log held a tool's fork-failure words
infra-error ("out of processes"). Both read text or facts the cell's own code controls:

- A kernel that ran unconfined (the shell runner of a node without python3, a node without
  Landlock) and removed its own `../stdout` on its way out of a failing run was the node's
  trouble: infra-error, retried, infra-error again, exit 4, its node's health counted down, no
  regression on the kernel. Lost files are the node's only where the run could not have removed
  them (confined); else the cell is judged as a run with no evidence: `fail` / `missing-refusal`.
- A build command that printed `sh: 1: Cannot fork` and exited 1 was infra-error: a job's broken
  build read as a node out of processes. The words count only where the node itself, asked by
  the farm after the failed stage, cannot start a process (run/node_limits.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import write_fault_farm
from nodes import CARDS, SshNode, query, running_node, standin_job
from test_faults import attempts, results, run_farm

from orchestrator.classify import Evidence, classify
from orchestrator.errors import EXIT_UNEXPECTED
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation

NAME = "n118"
MIN75 = {"min": "7.5"}

SELF_REMOVER = rb"""
#include <stdio.h>
#include <unistd.h>
int main(void) {
    fputs("standin: wrong numbers\n", stderr);
    fflush(stderr);
    unlink("../stdout");  /* its own run's files, beside its work folder */
    unlink("../stderr");
    return 1;
}
"""


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    yield from running_node(NAME, tmp_path / "node", CARDS["t4"])


def _job(variants: dict[str, dict[str, object]]) -> dict:
    job = standin_job("k118", variants)
    job["sources"] = ["kernels/k118.c"]
    return job


def _variant(build: str = "gcc -O1 -o {binary} {sources}", **extra: object) -> dict[str, object]:
    return {"build": build, "inspect": "objdump -d {binary}", "instructions": {"call": 1}, "cc": MIN75, **extra}


def _farm(node: SshNode, tmp_path: Path, variants: dict[str, dict[str, object]], source: bytes) -> Path:
    entry = node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3)
    return write_fault_farm(
        tmp_path, {NAME: entry}, [_job(variants)], {"kernels/k118.c": source}, retries=1, retry_backoff=0.2
    )


FORGED_FORK = rb"""
#include <stdio.h>
int main(void) { puts("standin: PASS"); return 0; }
"""


@pytest.mark.usefixtures("runner")
def test_a_kernel_that_removes_its_own_run_files_is_no_node_fault(node: SshNode, tmp_path: Path) -> None:
    """Before ([shell]): infra-error "run files ... were gone", tried twice, exit 4. Figure: `fail`
    on one try on every runner; unconfined, the reason says the kernel could have removed them."""
    config = _farm(node, tmp_path, {"self": _variant()}, SELF_REMOVER)
    summary, _ = run_farm(config)
    db = tmp_path / "results.db"
    row = results(db, summary.run_id)[(NAME, "self")]
    assert row["outcome"] == "fail", row["reason"]
    assert [t["status"] for t in attempts(db, summary.run_id, NAME, "self")] == ["ok"]
    assert summary.exit_code == EXIT_UNEXPECTED


def test_a_build_that_prints_a_fork_failure_is_its_own_build_fail(node: SshNode, tmp_path: Path) -> None:
    """Before: infra-error "its build could not start a process ("sh: 1: Cannot fork"): the node's
    user is out of processes", retried, exit 4. Figure: build-fail, its log noting the node forked."""
    forged = _variant('gcc -o {binary} {sources} && echo "sh: 1: Cannot fork" >&2 && exit 1')
    config = _farm(node, tmp_path, {"forged": forged}, FORGED_FORK)
    summary, _ = run_farm(config)
    db = tmp_path / "results.db"
    row = results(db, summary.run_id)[(NAME, "forged")]
    assert row["outcome"] == "build-fail", row["reason"]
    assert [t["status"] for t in attempts(db, summary.run_id, NAME, "forged")] == ["ok"]
    log = query(db, "SELECT build_log FROM results WHERE id = ?", row["id"])[0]["build_log"]
    assert b"the node started processes when the farm asked" in bytes(log), log
    assert summary.exit_code == EXIT_UNEXPECTED


@pytest.mark.usefixtures("runner")
def test_a_run_that_prints_a_fork_failure_before_its_kernel_is_no_node_fault(node: SshNode, tmp_path: Path) -> None:
    """Before: a run `echo "sh: 1: Cannot fork" >&2; exit 1; {binary}` was infra-error "out of
    processes", retried. Figure: fail ("the run never started the kernel"), one try."""
    forged = _variant(run='echo "sh: 1: Cannot fork" >&2; exit 1; {binary}')
    config = _farm(node, tmp_path, {"forged": forged}, FORGED_FORK)
    summary, _ = run_farm(config)
    db = tmp_path / "results.db"
    row = results(db, summary.run_id)[(NAME, "forged")]
    assert row["outcome"] == "fail", row["reason"]
    assert [t["status"] for t in attempts(db, summary.run_id, NAME, "forged")] == ["ok"]


# ------------------------------------------------------------------ the verdicts, as a table


def _must_refuse() -> Expectation:
    return Expectation(Outcome.EXPECTED_REFUSAL, "needs CC >= 9.0, the card is 7.5")


def _ran(**fields: object) -> Evidence:
    return Evidence(build_exit=0, inspect_exit=0, kernel_started=True, **fields)  # type: ignore[arg-type]


def test_lost_files_unconfined_are_no_evidence_whatever_was_left() -> None:
    """A refusal left on stderr once the kernel removed its stdout (its pass line) is no refusal,
    a pass is no pass; a timeout stays one; without the note nothing changes."""
    lost = "stdout"
    refused = _ran(run_exit=1, kernel_exit=1, refusal_line=1, run_files_lost=lost)
    assert classify(refused, _must_refuse()).outcome is Outcome.MISSING_REFUSAL
    passed = _ran(run_exit=0, kernel_exit=0, pass_line=1, run_files_lost=lost)
    verdict = classify(passed, Expectation(Outcome.PASS, "CC 7.5 >= 7.5"))
    assert verdict.outcome is Outcome.FAIL and "could have removed them itself" in verdict.reason
    timed = _ran(run_exit=124, run_timed_out=True, run_files_lost=lost)
    assert classify(timed, Expectation(Outcome.PASS, "x")).outcome is Outcome.TIMEOUT
    assert classify(_ran(run_exit=1, kernel_exit=1, refusal_line=1), _must_refuse()).outcome is (
        Outcome.EXPECTED_REFUSAL
    )


def test_round_115_pass_marker_only_in_the_refusal_or_on_stderr_is_a_refusal() -> None:
    """The pass marker is read on stdout only: the gate's text quoting it on stderr is still a
    refusal; a kernel run twice, refusing once and passing once, refused nothing."""
    assert classify(_ran(run_exit=1, kernel_exit=1, refusal_line=2), _must_refuse()).outcome is (
        Outcome.EXPECTED_REFUSAL
    )
    twice = _ran(run_exit=1, kernel_exit=1, refusal_line=1, pass_line=1, kernel_exited_0=True)
    assert classify(twice, _must_refuse()).outcome is Outcome.MISSING_REFUSAL
