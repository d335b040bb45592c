"""Run files lost where the run itself could have removed them: no node fault.

Round 116 made a cell whose run files (stdout, stderr, `.farm-status`, `.farm-other`) were gone
when its run ended infra-error: the node's trouble (a cleaner, an `rm -rf`, a disk gone read-only),
retried, counted against the node's health. Confined by Landlock the run can write only beneath its
`work/` folder, so the files beside it are not its to remove. Unconfined (the shell runner of nodes
without python3, a node kernel without Landlock) a kernel that failed and removed `../stdout` on its
way out read as infra-error on every try: a broken kernel hidden as a flaky node (review round 118).
There the cell is judged as a run whose output is no evidence, `fail` or `missing-refusal`, never
green nor the node's: the run stage (stages/run.py) raises infra-error only for a confined run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from orchestrator.outcomes import Outcome

if TYPE_CHECKING:
    from orchestrator.classify import Evidence
    from orchestrator.plan import Expectation

V = TypeVar("V")  # classify.Verdict, which this module cannot import (classify/__init__.py imports it)

# verdicts the run's lost files leave standing: decided before the run's output was read, or by
# the farm's own clock (timeout), or already no kernel verdict
_KEPT = (Outcome.TIMEOUT, Outcome.NOT_RUN, Outcome.INFRA_ERROR, Outcome.COMPILE_ONLY)


def lost_unconfined(verdict: V, ev: Evidence, exp: Expectation) -> V:
    """A run verdict of a cell whose run files were lost unconfined (`ev.run_files_lost`), as one of
    no evidence: its pass marker, refusal or statuses may be gone by the run's own hand."""
    outcome = getattr(verdict, "outcome", None)
    if not ev.run_files_lost or outcome in _KEPT or getattr(verdict, "failed_stage", None) not in (None, "run"):
        return verdict
    reason = (
        f"the cell's run files on the node ({ev.run_files_lost}) were gone when its run ended, and its run "
        "ran unconfined (no Landlock, or the shell runner): the kernel could have removed them itself, so "
        "this is no node fault, and what is left of its output is no evidence"
    )
    must_pass = exp.outcome is Outcome.PASS
    return replace(
        verdict, outcome=Outcome.FAIL if must_pass else Outcome.MISSING_REFUSAL, failed_stage="run", reason=reason
    )
