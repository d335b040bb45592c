"""A run that left processes running: no pass, no refusal. Red-team round 257.

The farm kills whatever a cell's run still has running once its commands ended: what its process group
holds (a kernel's forked child, a run's `helper &`), what the python runner, its subreaper, inherits (a
daemon that cleared its environment), and what carries the cell's FARM_CELL marker (a double fork into a
session of its own). The kernel's exit 0 and pass line were read, but a process it started was still at
work on its card: its own check may print FAIL a second later, CUDA's error text, or hold the card the
next cell runs on. What it would have said the farm never sees, so the kernel's word backs nothing: a
`pass`, an `expected-refusal` (a gate that refused but left a process at work on a card it must refuse)
is judged as a run without evidence, `fail` or `missing-refusal`, as for a kernel command sent to the
background (kernel_unfinished). Its failures stand as they are: they were the kernel's own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from orchestrator.outcomes import Outcome

if TYPE_CHECKING:
    from orchestrator.classify.evidence import Evidence
    from orchestrator.plan import Expectation

V = TypeVar("V")  # classify.Verdict, which this module cannot import (classify/__init__.py imports it)

_GREEN = (Outcome.PASS, Outcome.EXPECTED_REFUSAL)


def left_running_unbacked(verdict: V, ev: Evidence, exp: Expectation) -> V:
    """A pass or an expected refusal as no evidence where the run left processes running (ev.run_leftover)."""
    outcome = getattr(verdict, "outcome", None)
    if not ev.run_leftover or outcome not in _GREEN:
        return verdict
    said = getattr(verdict, "reason", "")
    reason = (
        f"{ev.run_leftover} process(es) of the run were still running when its commands had ended, and the "
        "farm killed them: what they would have printed or done on the card is unknown, so the run's "
        f"{outcome} ({said}) is no evidence; a kernel must wait for what it starts"
    )
    must_pass = exp.outcome is Outcome.PASS
    return replace(  # type: ignore[type-var]
        verdict, outcome=Outcome.FAIL if must_pass else Outcome.MISSING_REFUSAL, failed_stage="run", reason=reason
    )
