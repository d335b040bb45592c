"""Red-team 222: a stored `fixed` cell whose `instructions:` the farm no longer backs stayed green.

`fixed` (a declared known failure that now behaves as the contract says) certifies as a pass does
(store/certifying.py), and the ledger voided its CC when its instructions were counted the way the
farm no longer trusts (`instructions-unbacked`: PTX names read as words of a cubin's dump before
round 73, SASS names counted in cubins a ptx-jit card never ran before round 58). The matrix's
rejudging (report/rejudged.py) held only `pass` and `perf-regression` rows to that rule, so the same
cell read green on the matrix while the ledger said its CC was not VERIFIED."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from test_config import GOOD_FARM, GOOD_JOB, make_farm

from orchestrator.config.farm import load_farm
from orchestrator.report.rejudged import rejudged

JOB = (
    GOOD_JOB
    + """\
    instructions: {ldmatrix: 1}
    known_failures:
      - when: {cc: {min: "8.0"}}
        outcome: fail
        reason: wrong numbers on Ampere (issue 12)
"""
)

# the inspect detail of a native pass stored before round 73: `ldmatrix` met as a word of the cubin's dump
OLD_DETAIL = {"inspect": {"detail": "counted in the sm_80 cubin a CC 8.0 card loads; ldmatrix in ldmatrix"}}


def _row(outcome: str) -> SimpleNamespace:
    return SimpleNamespace(
        outcome=outcome,
        cc="8.0",
        contract="CC >= 7.5",
        contract_expected="pass",
        expected="known-failure",
        build_command=None,
        nvcc_version="13.0.48",
        cuda_waived=False,
        code_path="native",
        jit_stages=OLD_DETAIL,
    )


def test_a_fixed_cell_whose_instructions_are_unbacked_is_not_green(tmp_path: Path) -> None:
    """Before: the `pass` row was rejudged "counted as words of the cubin ... certifies once it runs
    again", the `fixed` row of the same cell nothing (green on the matrix). Figure: both rejudged."""
    farm = load_farm(make_farm(tmp_path, farm=GOOD_FARM, job=JOB))
    key = ("k", "v1", "t4", "A100")
    said = {
        outcome: rejudged(farm, {key: SimpleNamespace(result=_row(outcome))}, {}).get(key)
        for outcome in ("pass", "fixed")
    }
    assert said["pass"] is not None and "runs again" in said["pass"], said
    assert said["fixed"] == said["pass"], said
