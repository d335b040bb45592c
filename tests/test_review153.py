"""Review 153: a critical review of the day's merges (red-teams 140-151, reviews 141-152).

- `farm show` still said "nothing of it certifies" of a fail's unfinished run and "certifies
  nothing" of a fail's missing identity: review 152 kept those words to the outcomes they withhold
  something from (a pass, an expected refusal, fixed, a perf-regression) on the card and ran lines
  alone, and a fail read as if a pass had been withheld on the other two.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from farm_cli import farm
from test_metrics import new_run, result_record
from toyfarm import toy_farm

from orchestrator.store.database import Store


def _show(tmp_path: Path, outcome: str) -> str:
    """`farm show` of one result of `outcome`, of inputs not all identified, in a run that was aborted."""
    config = toy_farm(tmp_path)
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None
    try:
        run_id, snapshot = new_run(store)
        result_id = store.add_result(replace(result_record(run_id, snapshot, outcome=outcome), identity=None))
        store.finish_run(run_id, "aborted", None)
    finally:
        store.close()
    done = farm("show", str(result_id), "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _line(said: str, key: str) -> str:
    found = re.search(rf"^{key} .*$", said, re.M)
    assert found, said
    return found.group()


def test_farm_show_says_a_fails_run_and_identity_certify_nothing_only_where_it_applies(tmp_path: Path) -> None:
    failed = _show(tmp_path / "fail", "fail")
    run, identity = _line(failed, "run"), _line(failed, "identity")
    assert "did not finish (aborted)" in run and "not every input identified" in identity, failed
    assert "certif" not in run + identity, failed
    passed = _show(tmp_path / "pass", "pass")
    assert _line(passed, "run").endswith("did not finish (aborted): nothing of it certifies"), passed
    assert _line(passed, "identity").endswith("(not every input identified: certifies nothing)"), passed
