"""Review 236: two follow-ups of red-team 235 and red-team 230.

- A cell two known failures cover (nvcc 13.0's build-fail, Turing's wrong numbers): classify asks
  each (red-team 235), but the store kept only the first declaration's reason, so the cell page's
  "Known failure declared" named the build failure over a run's wrong numbers. And the matrix's
  rejudging kept a stored `known-failure` green while any declaration still covered the cell, even
  one naming another failure than the one stored.
- `farm bisect` rendered its cell page into the reports folder only after the whole walk: a folder
  it cannot write was found after every commit's run (`farm verify` checks first, red-team 230).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from farm_cli import farm
from test_bisect import commit, git
from test_classify import built
from test_config import GOOD_FARM, make_farm
from test_redteam230 import read_only
from test_redteam235 import SNAPSHOT, _job
from toyfarm import toy_farm

from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import load_farm
from orchestrator.outcomes import Outcome
from orchestrator.plan import Cell, expect
from orchestrator.report.cell_page import cell_body
from orchestrator.report.rejudged import rejudged
from orchestrator.run.cell import CellResult
from orchestrator.store.records import result_record

BUILD = "nvcc 13.0 rejects the header (issue 3)"
TURING = "wrong numbers on Turing (issue 9)"
TWO = f"""\
      - when: {{nvcc: ">=13.0,<13.1"}}
        outcome: build-fail
        reason: {BUILD}
      - when: {{cc: {{exactly: "7.5"}}}}
        outcome: fail
        reason: {TURING}
"""


def _stored(tmp_path: Path, evidence: Evidence):
    """The row `evidence` makes of the T4 cell (nvcc 13.0.88) both declarations cover, and its page."""
    tmp_path.mkdir()
    loaded = load_farm(make_farm(tmp_path, farm=GOOD_FARM, job=_job(TWO)))
    job = loaded.jobs["k"]
    exp = expect(
        job, job.spec.variants["v1"], dataclasses.replace(SNAPSHOT, nvcc_version="13.0.88"), ComputeCapability(7, 5)
    )
    cell = Cell("k", "v1", "t4", "Tesla T4")
    result = CellResult(cell, exp, verdict=classify(evidence, exp), evidence=evidence)
    record = result_record(1, None, cell, job, result, None, [])
    row = SimpleNamespace(**{f.name: getattr(record, f.name) for f in dataclasses.fields(record)}, id=1)
    page = cell_body(row, datetime(2026, 1, 1, tzinfo=UTC), [], None)
    return record, page


def test_the_stored_known_failure_is_the_declaration_that_matched(tmp_path: Path) -> None:
    """Before: a built binary's wrong numbers on the T4 were `known failure: wrong numbers on Turing`,
    while the row's known_failure_reason, and the cell page's "Known failure declared" line under it,
    said "nvcc 13.0 rejects the header" (the job's first declaration); a `fixed` row named only that
    one too. Figure: the declaration the verdict matched; for `fixed`, every one that covers the cell."""
    record, page = _stored(tmp_path / "numbers", built(run_exit=1))
    assert record.outcome == Outcome.KNOWN_FAILURE.value and TURING in record.reason, record.reason
    assert record.known_failure_reason == TURING, record.known_failure_reason
    assert f"Known failure declared:</strong> {TURING}" in page, page
    assert BUILD not in page, page
    record, page = _stored(tmp_path / "build", Evidence(build_exit=1))
    assert record.known_failure_reason == BUILD, record.known_failure_reason
    record, page = _stored(tmp_path / "fixed", built(run_exit=0, stdout=b"PASS"))
    assert record.outcome == Outcome.FIXED.value, record.reason
    assert BUILD in (record.known_failure_reason or "") and TURING in (record.known_failure_reason or ""), record
    assert "Known failures declared here:" in page and TURING in page and BUILD in page, page


def _row(failed_stage: str, reason: str, nvcc: str) -> SimpleNamespace:
    return SimpleNamespace(
        outcome="known-failure",
        failed_stage=failed_stage,
        reason=f"known failure: {reason}",
        cc="7.5",
        contract="CC >= 7.5",
        contract_expected="pass",
        expected="known-failure",
        build_command=None,
        nvcc_version=nvcc,
        cuda_waived=False,
        code_path=None,
        jit_stages=None,
    )


def test_a_stored_known_failure_is_judged_against_its_own_declaration(tmp_path: Path) -> None:
    """Before: a stored build-fail known failure (nvcc 13.0's) stayed green after the job narrowed that
    declaration to nvcc 12 only, because Turing's wrong-numbers declaration still covered the cell,
    though it names another failure. A build that fails now is a red build-fail. Figure: rejudged,
    "no longer cover", while the wrong-numbers row of the same job stays as it was."""
    narrowed = TWO.replace('">=13.0,<13.1"', '"<13.0"')
    loaded = load_farm(make_farm(tmp_path, farm=GOOD_FARM, job=_job(narrowed)))
    key = ("k", "v1", "t4", "Tesla T4")
    build = rejudged(loaded, {key: SimpleNamespace(result=_row("build", BUILD, "13.0.88"))}, {}).get(key)
    assert build is not None and "no longer cover" in build, build
    numbers = rejudged(loaded, {key: SimpleNamespace(result=_row("run", TURING, "13.0.88"))}, {}).get(key)
    assert numbers is None, numbers
    # a declaration's text edited since: judged by the failure's stage, not left unjudged
    edited = rejudged(loaded, {key: SimpleNamespace(result=_row("run", "old words", "13.0.88"))}, {}).get(key)
    assert edited is None, edited
    gone = rejudged(loaded, {key: SimpleNamespace(result=_row("build", "old words", "13.0.88"))}, {}).get(key)
    assert gone is not None, gone


def test_bisect_refuses_a_reports_folder_it_cannot_write_before_its_walk(tmp_path: Path) -> None:
    """Before: the walk ran every commit (runs stored, builds made), and only then did the cell page's
    render fail: exit 3 after the verdict, minutes of work later. Figure: exit 3 at once, naming
    farm.yaml's `reports` and why, no bisection run stored, the folder untouched."""
    root = tmp_path / "toy"
    config = toy_farm(root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "farm.yaml", "jobs", "kernels")
    git(root, "commit", "-q", "-m", "toy")
    good = git(root, "rev-parse", "HEAD")
    commit(root, "toy: break the build", {"kernels/toy.cpp": "int main( {"})
    reports = root / "reports"
    reports.mkdir()
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path), "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    with read_only(reports):
        done = farm(
            *("bisect", "toy:plain", "--node", "here", "--good", good, "--bad", "HEAD", "--config", str(config)),
            cwd=root,
            extra_env=env,
        )
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith(f"Error: {config}: reports: found {reports}, a folder that cannot be written"), (
        done.stderr
    )
    assert "Read-only file system" in done.stderr and "--out" in done.stderr, done.stderr
    assert "step" not in done.stdout, done.stdout  # no commit was run
    if (root / "results.db").exists():
        with sqlite3.connect(root / "results.db") as db:
            assert db.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    assert list(reports.iterdir()) == []
