"""Review 146: a pass whose inputs the farm did not all identify (no identity: a dependency the
staging did not digest) certifies nothing, in the one certifying rule (store/certifying.py) and so
in the ledger and `farm show`; yet the matrix showed it green, JSON said `certifies_nothing: false`
and JUnit counted it a plain pass (review 145's leftover). Now it is greyed and said everywhere, as a
stand-in card's pass is; the run's history row counts it with its reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from test_metrics import new_run, result_record
from test_review141 import _said

from orchestrator.report.unbacked import UNIDENTIFIED
from orchestrator.store.database import Store
from orchestrator.store.records import SnapshotRecord


def test_a_pass_with_no_identity_certifies_nothing_anywhere(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None
    run_id, _ssh = new_run(store)
    node = store.add_snapshot(
        SnapshotRecord(run_id=run_id, node="here", transport="ssh", address="h", gpu_count=1, real_gpu=True)
    )
    result_id = store.add_result(replace(result_record(run_id, node, node="here"), real_gpu=True, identity=None))
    store.finish_run(run_id, "finished", 0)
    try:
        assert store.certifying_passes() == []  # the rule already refused it
        said = _said(store, run_id, result_id, tmp_path / "reports")
    finally:
        store.close()
    for where, words in said.items():
        assert UNIDENTIFIED in words, (where, words)
        assert "stand-in" not in words and "unconfined" not in words, (where, words)
