"""Whether a stored pass is one the CUDA-error rule was waived for (`cuda_error_text: expected`).

A waived pass is green, but it is not a pass the rule looked at: a reviewer certifying from the
matrix, the JSON, JUnit or the ledger must tell the two apart without opening the cell page. The
waiver was said only in the verdict's reason (red-team round 104). It is stamped on the
expectation (plan.expect), which the farm writes from the job file alone: no kernel output and no
node's word reaches it, so neither can make a strict pass read as waived or a waived one as strict.
"""

from __future__ import annotations

from typing import Any

from orchestrator.outcomes import Outcome

NOTE = "CUDA's error text declared expected (`cuda_error_text: expected`): the CUDA-error rule is waived"
FLAG = "CUDA-error rule waived"  # the matrix's and JUnit's words
PASSED = (Outcome.PASS.value, Outcome.FIXED.value, Outcome.PERF_REGRESSION.value)


def noted(reason: str, waived: bool) -> str:
    """The expectation's reason, with the waiver said where the job declares it."""
    return f"{reason}; {NOTE}" if waived else reason


def was_waived(row: Any) -> bool:
    """A stored pass (any row with outcome and expected_reason) judged with the rule waived."""
    return getattr(row, "outcome", None) in PASSED and NOTE in (getattr(row, "expected_reason", None) or "")
