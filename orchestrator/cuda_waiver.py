"""Whether a stored pass is one the CUDA-error rule was waived for (`cuda_error_text: expected`).

A waived pass is green, but it is not a pass the rule looked at: a reviewer certifying from the
matrix, the JSON, JUnit or the ledger must tell the two apart without opening the cell page. The
waiver was said only in the verdict's reason (red-team round 104). It is stamped on the
expectation (plan.expect), which the farm writes from the job file alone: no kernel output and no
node's word reaches it, so neither can make a strict pass read as waived or a waived one as strict.

The flag is stored typed, `results.cuda_waived` (migration 0015), written from the expectation's
boolean (stored_waiver): it was read back from NOTE standing in the stored expected_reason, so a
reason that merely held those words read as waived, and a rewording of NOTE would have made every
stored waived pass read strict (review 111). NOTE stays the words shown; legacy_waived is the old
rule, kept only for rows written before the column (0015's backfill, an older farm's journal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.outcomes import Outcome

if TYPE_CHECKING:  # plan imports this module
    from orchestrator.plan import Expectation

NOTE = "CUDA's error text declared expected (`cuda_error_text: expected`): the CUDA-error rule is waived"
FLAG = "CUDA-error rule waived"  # the matrix's and JUnit's words
PASSED = (Outcome.PASS.value, Outcome.FIXED.value, Outcome.PERF_REGRESSION.value)


def noted(reason: str, waived: bool) -> str:
    """The expectation's reason, with the waiver said where the job declares it."""
    return f"{reason}; {NOTE}" if waived else reason


def stored_waiver(expectation: Expectation, outcome: Outcome) -> bool:
    """results.cuda_waived of a cell judged `outcome` under `expectation`: a pass (fixed,
    perf-regression) owed where the job waived the rule, exactly where noted() says NOTE."""
    owed = expectation.cuda_error_waived and expectation.outcome is Outcome.PASS
    return owed and outcome.value in PASSED


def legacy_waived(outcome: str | None, expected_reason: str | None) -> bool:
    """The rule before the column: NOTE in a stored pass's expected_reason. Only for rows that have
    no flag of their own (0015 applies it once; recovery to an older farm's journal)."""
    return outcome in PASSED and NOTE in (expected_reason or "")


def journaled(fields: dict[str, Any]) -> dict[str, Any]:
    """A journal's result fields with their cuda_waived: its own where this farm wrote it, else the
    old rule (a journal of a farm before 0015); never on a result that is no pass."""
    said = (
        fields["cuda_waived"]
        if "cuda_waived" in fields
        else legacy_waived(fields.get("outcome"), fields.get("expected_reason"))
    )
    return {**fields, "cuda_waived": bool(said) and fields.get("outcome") in PASSED}


def was_waived(row: Any) -> bool:
    """A stored pass (any row with outcome and cuda_waived) judged with the rule waived. A pass's
    cuda_waived is read, not defaulted: a row selected without it must fail, not read strict."""
    return getattr(row, "outcome", None) in PASSED and bool(row.cuda_waived)
