"""A refusal is a gate's: it stops the kernel's work before the work runs.

On a card its contract excludes, a kernel that printed its gate's text and exited non-zero had been
judged `expected-refusal` whatever else it printed. One whose pass marker was on stdout too had run
its work there (a gate checked after the launch, a check that printed and went on) and certified its
gate green (red-team round 115). The pass marker is the farm's evidence that the work ran, so beside
a refusal it makes the cell `missing-refusal`, as a kernel command that exited 0 does (classify/).

A missing refusal whose gate was there but spoke wrongly says how (review 123): a newcomer's gate that
printed its text on stdout, or printed it on stderr and exited 0, read "exit 2 without the refusal text
on stderr" and "ran on a card it must refuse", as a kernel with no gate at all does. The verdict stays.
So does one whose text its marker misses by a carriage return before its `$`, or by a Unicode normal
form (review 208: failure_words.near_miss).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from orchestrator.outcomes import Outcome

if TYPE_CHECKING:
    from orchestrator.classify.evidence import Evidence
    from orchestrator.plan import Expectation

V = TypeVar("V")  # classify.Verdict, which this module cannot import (classify imports it)


def judge_gate(verdict: V, ev: Evidence, exp: Expectation) -> V:
    """The raw verdict judged by the gate's order, then a missing refusal told how its gate spoke."""
    return _how_the_gate_spoke(ran_before_refusing(verdict, ev, exp), ev)


def _how_the_gate_spoke(verdict: V, ev: Evidence) -> V:
    """A missing refusal whose refusal text was printed where, or as, no refusal is read: said so."""
    reason, outcome = getattr(verdict, "reason", ""), getattr(verdict, "outcome", None)
    if outcome is Outcome.FAIL and ev.refusal_near and ev.run_exit:  # a gate on a card it serves (review 208)
        return replace(verdict, reason=reason + ev.refusal_near)
    if outcome is not Outcome.MISSING_REFUSAL or ev.pass_line is not None:
        return verdict
    if ev.refusal_near and ev.refusal_line is None:  # its text, missed by a `\r` or a normal form (review 208)
        return replace(verdict, reason=reason + ev.refusal_near)
    if ev.refusal_line is None and ev.refusal_on_stdout is not None:
        hint = (
            f"its refusal marker matched stdout line {ev.refusal_on_stdout}, but a refusal is read on stderr "
            "only: print the gate's text to stderr"
        )
        # it exited 0 too: told only of stderr, the author's next run was told of the exit (review 124)
        hint += ", and exit non-zero after it" if ev.run_exit == 0 else ""
    elif ev.refusal_line is not None and ev.run_exit == 0:
        hint = (
            f"its refusal text is on stderr (line {ev.refusal_line}), but it exited 0: "
            "a gate must exit non-zero after its text"
        )
    else:
        return verdict
    return replace(verdict, reason=f"{reason}; {hint}")


def ran_before_refusing(verdict: V, ev: Evidence, exp: Expectation) -> V:
    """An expected refusal whose kernel also printed its pass marker, as `missing-refusal`."""
    if getattr(verdict, "outcome", None) is not Outcome.EXPECTED_REFUSAL or ev.pass_line is None:
        return verdict
    reason = (
        f"printed its pass marker (stdout line {ev.pass_line}) beside its refusal text (stderr line "
        f"{ev.refusal_line}): its work ran on a card it must refuse ({exp.reason}), so its gate refused nothing"
    )
    return replace(verdict, outcome=Outcome.MISSING_REFUSAL, failed_stage="run", reason=reason)
