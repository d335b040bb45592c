"""Review 111: the CUDA-error waiver is a typed column, not a substring of a note.

A pass judged with `cuda_error_text: expected` was recognized by cuda_waiver.NOTE standing in its
expected_reason (`was_waived`, `Store.waived_results`): a reason that merely held those words read as
waived, and a rewording of NOTE would have turned every stored waived pass strict. `results.cuda_waived`
(migration 0015) holds the expectation's flag; 0015 fills it once for older rows by the old rule, and
`farm import` does the same for a journal written before it.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import MetaData, Table, create_engine, select
from test_records import OLD_JOURNAL, full_result
from test_redteam99 import postgres_database  # noqa: F401 - a fixture

from orchestrator.cuda_waiver import FLAG, NOTE, was_waived
from orchestrator.report import export
from orchestrator.report.model import collect
from orchestrator.report.site import render
from orchestrator.store.database import Store
from orchestrator.store.engine import _alembic_config

RUN = {"token": "t", "trigger": "t", "farm_version": "t", "host": "h", "config_file": "f", "selection": "s"}
LOOKALIKE = f"CC 7.5 satisfies CC >= 7.5; a note quoting the farm: {NOTE}"  # the words, no waiver


def _pass(run_id: int, variant: str, expected_reason: str, **waiver: bool) -> Any:
    """A pass as expected on a confirmed card (full_result's, made a plain pass)."""
    base = full_result(run_id, None, variant)
    return dataclasses.replace(
        base,
        expected="pass",
        contract_expected="pass",
        known_failure_reason=None,
        outcome="pass",
        failed_stage=None,
        sanitizer=None,
        expected_reason=expected_reason,
        **waiver,
    )


def _flags(store: Store, run_id: int, tmp_path: Path) -> dict[str, dict[str, bool]]:
    """Per variant, whether each place a reviewer certifies from flags it waived."""
    model = collect(store, run_id, None)
    cells = {c["variant"]: c for c in json.loads(export.as_json(model))["cells"]}
    cases = {c.get("classname"): c for c in ET.fromstring(export.junit(model)).iter("testcase")}
    index = render(store, tmp_path / "site").read_text()
    rows = {r.variant: r for r in store.results(run_id)}
    found = {}
    for variant, row in rows.items():
        junit = {p.get("name"): p.get("value") for p in cases[f"gemm.{variant}"].iter("property")}
        matrix = index[index.index('id="matrix"') :]
        cell = matrix[matrix.index(f'data-cell="gemm:{variant}') :].split("</td>")[0]
        found[variant] = {
            "row": was_waived(row),
            "query": row.id in store.waived_results([run_id]),
            "json": cells[variant]["cuda_error_waived"],
            "junit": junit.get("cuda_error_waived") == FLAG,
            "matrix": FLAG in cell,
            # the cell's own page, from the column too (its reason's words showed as a waiver there)
            "page": 'class="flag waived"' in (tmp_path / "site" / "cells" / f"{row.id}.html").read_text(),
        }
    return found


def test_a_reason_that_merely_holds_the_note_is_not_waived(tmp_path: Path) -> None:
    """(a) The expectation was not waived: the note's words in its reason flag nothing (they did)."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        run_id = store.begin_run(planned=[("gemm", "look", "h100", "NVIDIA H100")], **RUN)
        store.add_result(_pass(run_id, "look", LOOKALIKE))
        store.finish_run(run_id, "finished", 0)
        flags = _flags(store, run_id, tmp_path)
    finally:
        store.close()
    assert flags["look"] == dict.fromkeys(("row", "query", "json", "junit", "matrix", "page"), False), flags


def test_a_waived_pass_is_flagged_everywhere_and_only_a_pass(tmp_path: Path) -> None:
    """(b) The flag written with the result is what the matrix, the JSON and JUnit say; a waived
    expectation whose cell failed is no waived pass (was_waived's semantics, kept)."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        planned = [("gemm", v, "h100", "NVIDIA H100") for v in ("waived", "strict")]
        run_id = store.begin_run(planned=planned, **RUN)
        store.add_result(_pass(run_id, "waived", f"CC 9.0 satisfies CC >= 8.0; {NOTE}", cuda_waived=True))
        store.add_result(_pass(run_id, "strict", "CC 9.0 satisfies CC >= 8.0"))
        store.finish_run(run_id, "finished", 0)
        flags = _flags(store, run_id, tmp_path)
    finally:
        store.close()
    assert flags["waived"] == dict.fromkeys(("row", "query", "json", "junit", "matrix", "page"), True), flags
    assert flags["strict"] == dict.fromkeys(("row", "query", "json", "junit", "matrix", "page"), False), flags


def test_the_flag_is_the_expectations_and_only_for_a_pass() -> None:
    """What result_record stores: the expectation's typed flag, for a pass, fixed or perf-regression."""
    from orchestrator.cuda_waiver import stored_waiver
    from orchestrator.outcomes import Outcome
    from orchestrator.plan import Expectation

    waived = Expectation(Outcome.PASS, f"CC 7.5 satisfies CC >= 7.5; {NOTE}", cuda_error_waived=True)
    strict = Expectation(Outcome.PASS, LOOKALIKE)
    refusal = Expectation(Outcome.EXPECTED_REFUSAL, "CC 7.5 is outside CC >= 8.0", cuda_error_waived=True)
    for outcome in Outcome:
        passed = outcome in (Outcome.PASS, Outcome.FIXED, Outcome.PERF_REGRESSION)
        assert stored_waiver(waived, outcome) is passed, outcome
        assert stored_waiver(strict, outcome) is False, outcome
        assert stored_waiver(refusal, outcome) is False, outcome  # the note is said only where a pass is owed


@pytest.mark.parametrize(
    ("fields", "waived"),
    [
        ({"expected_reason": f"r; {NOTE}"}, True),  # an older farm's journal: the old rule, once
        ({"expected_reason": "r"}, False),
        ({"expected_reason": f"r; {NOTE}", "outcome": "fail"}, False),
        ({"expected_reason": f"r; {NOTE}", "cuda_waived": False}, False),  # this farm's: its field
        ({"expected_reason": "r", "cuda_waived": True}, True),
        ({"expected_reason": "r", "cuda_waived": True, "outcome": "fail"}, False),  # a fail is no waived pass
    ],
)
def test_an_imported_journal_gets_the_flag(tmp_path: Path, fields: dict[str, object], waived: bool) -> None:
    """`farm import`: a journal's own cuda_waived, or for an older farm's the rule 0015 backfills by."""
    text = OLD_JOURNAL.replace('"expected_reason":"r",', "".join(f'"{k}":{json.dumps(v)},' for k, v in fields.items()))
    if "outcome" in fields:
        text = text.replace('"outcome":"pass",', "", 1)
    path = tmp_path / "0123456789ab.jsonl"
    path.write_text(text)
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        store.import_journal(path)
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "results.db") as db:
        found = db.execute("SELECT outcome, cuda_waived FROM results WHERE variant = 'a'").fetchall()
    assert found == [(fields.get("outcome", "pass"), int(waived))]


def test_a_journal_carries_the_flag(tmp_path: Path) -> None:
    """A result journaled by this farm holds cuda_waived, so its import needs no note to read."""
    from orchestrator.store.journal import Journal, read

    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    store.journal = Journal(tmp_path / "journals", "t")
    try:
        run_id = store.begin_run(planned=[("gemm", "w", "h100", "NVIDIA H100")], **RUN)
        store.add_result(_pass(run_id, "w", "CC 9.0 satisfies CC >= 8.0", cuda_waived=True))
        store.finish_run(run_id, "finished", 0)
    finally:
        store.close()
    (journal,) = (tmp_path / "journals").glob("*.jsonl")
    (result,) = [fields for kind, fields in read(journal) if kind == "result"]
    assert result["cuda_waived"] is True


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_migration_backfills_an_older_database(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """(c) A database at 0014: its passes, fixed and perf-regressions whose expected_reason holds the
    note are waived after 0015; a fail with the note, and a pass without it, are not."""
    url = request.getfixturevalue("postgres_database") if backend == "postgresql" else f"sqlite:///{tmp_path / 'r.db'}"
    engine = create_engine(url)
    legacy = f"CC 9.0 satisfies CC >= 8.0; {NOTE}"
    rows = {
        "waived": ("pass", legacy),
        "fixed": ("fixed", legacy),
        "slower": ("perf-regression", legacy),
        "failed": ("fail", legacy),
        "strict": ("pass", "CC 9.0 satisfies CC >= 8.0"),
    }
    with engine.begin() as connection:
        config = _alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "0014")
        meta = MetaData()
        runs, results = (Table(name, meta, autoload_with=connection) for name in ("runs", "results"))
        assert "cuda_waived" not in results.c
        run = RUN | {"status": "finished", "started_at": full_result(0, None).started_at}
        run_id = connection.execute(runs.insert().values(**run)).inserted_primary_key[0]
        for variant, (outcome, reason) in rows.items():
            record = _pass(run_id, variant, reason).columns()
            record.pop("cuda_waived", None)
            record.pop("farm_writable", None)  # 0016's, after this test's revision
            connection.execute(results.insert().values(**{**record, "outcome": outcome}))
    engine.dispose()
    Store(url).close()  # upgrades it to this farm's head
    engine = create_engine(url)
    with engine.connect() as connection:
        results = Table("results", MetaData(), autoload_with=connection)
        found = dict(connection.execute(select(results.c.variant, results.c.cuda_waived)).all())
        column = results.c.cuda_waived
    engine.dispose()
    assert {k: bool(v) for k, v in found.items()} == {
        "waived": True,
        "fixed": True,
        "slower": True,
        "failed": False,
        "strict": False,
    }
    assert column.nullable is False and column.server_default is not None


def test_farm_show_flags_a_waived_pass_from_the_column_alone(tmp_path: Path) -> None:
    """`farm show` says the waiver as the matrix does, from results.cuda_waived: a reason that
    merely holds the note's words is no flag there either."""
    from click.testing import CliRunner

    from orchestrator.cli import main

    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = Store(url)
    try:
        planned = [("gemm", v, "h100", "NVIDIA H100") for v in ("waived", "look")]
        run_id = store.begin_run(planned=planned, **RUN)
        store.add_result(_pass(run_id, "waived", f"CC 9.0 satisfies CC >= 8.0; {NOTE}", cuda_waived=True))
        store.add_result(_pass(run_id, "look", LOOKALIKE))
        store.finish_run(run_id, "finished", 0)
        ids = {r.variant: r.id for r in store.results(run_id)}
    finally:
        store.close()
    config = Path(__file__).resolve().parent.parent / "farms" / "hopper-h100.yaml"
    said = {}
    for variant, rid in ids.items():
        shown = CliRunner().invoke(main, ["show", str(rid), "--config", str(config), "--database", url])
        assert shown.exit_code == 0, shown.output
        said[variant] = [line for line in shown.output.splitlines() if line.startswith("flag ")]
    assert len(said["waived"]) == 1 and FLAG in said["waived"][0], said
    assert said["look"] == [], said
