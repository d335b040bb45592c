"""A refusal is a gate's: it stops the kernel's work before the work runs.

On a card its contract excludes, a kernel that printed its gate's text and exited non-zero had been
judged `expected-refusal` whatever else it printed. One whose pass marker was on stdout too had run
its work there (a gate checked after the launch, a check that printed and went on) and certified its
gate green (red-team round 115). The pass marker is the farm's evidence that the work ran, so beside
a refusal it makes the cell `missing-refusal`, as a kernel command that exited 0 does (classify.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from orchestrator.outcomes import Outcome

if TYPE_CHECKING:
    from orchestrator.classify import Evidence
    from orchestrator.plan import Expectation

V = TypeVar("V")  # classify.Verdict, which this module cannot import (classify imports it)


def ran_before_refusing(verdict: V, ev: Evidence, exp: Expectation) -> V:
    """An expected refusal whose kernel also printed its pass marker, as `missing-refusal`."""
    if getattr(verdict, "outcome", None) is not Outcome.EXPECTED_REFUSAL or ev.pass_line is None:
        return verdict
    reason = (
        f"printed its pass marker (stdout line {ev.pass_line}) beside its refusal text (stderr line "
        f"{ev.refusal_line}): its work ran on a card it must refuse ({exp.reason}), so its gate refused nothing"
    )
    return replace(verdict, outcome=Outcome.MISSING_REFUSAL, failed_stage="run", reason=reason)
