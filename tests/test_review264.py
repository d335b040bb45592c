"""Review round 264: a night operator reads the report after partial failures (review 259's open items).

Found (before/after):
- history.html had one "infra" column: a broken node's infra-error and a stop's not-run alike, and a dead
  `running` run's planned cells with no result in no count at all ("0" beside a run that lost its cells).
  Now "infra-error" and "not-run" columns, the not-run counting the cells with no result stored, said so.
- A run that lost a node ended on "2 infra; exit 4 (every verdict as expected, but some cells could not
  run (infra))", the node named only in each cell's reason and the rerun left to the operator. Now a line
  before it names the nodes and the command that reruns just their cells (`farm verify ... --node NAME`),
  as a stopped run's line names its next step (review 253).
- The JSON summary's `infra` counts not-run too (kept, for its readers); `infra_error` is added beside it.
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from farm_cli import farm
from nodes import CARDS, Fleet, query, standin_job, standin_variant, write_farm
from toyfarm import toy_farm

from orchestrator.outcomes import Outcome
from orchestrator.run.summary import RunSummary

MIN75 = {"min": "7.5"}


def _history_row(history: str, run_id: int) -> list[str]:
    row = re.search(rf'<tr data-run="{run_id}">(.*?)</tr>', history, re.DOTALL)
    assert row is not None, history[-3000:]
    return [re.sub(r"<[^>]+>", " ", td).split() for td in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.DOTALL)]


def test_history_counts_infra_error_apart_from_not_run_and_a_dead_runs_missing_cells(tmp_path: Path) -> None:
    """Before: history.html's one "infra" column read 1 for a node's infra-error and for a stopped run's
    not-run alike, and 0 for a run left `running` whose cell has no result. Figure: its header has
    "infra-error" and "not-run" columns; run 1 (infra-error) reads 1 and 0, run 2 (running, its cell
    never stored) 0 and 1 "with no result stored", run 3 (aborted, its cell stored not-run) 0 and 1; the
    JSON export of run 1 says `infra_error: 1` beside `infra: 1`, `not_run: 0`."""
    config = toy_farm(tmp_path)
    for _ in range(3):
        assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE results SET outcome = 'infra-error' WHERE run_id = 1")
        db.execute("UPDATE runs SET status = 'running', exit_code = NULL WHERE id = 2")
        db.execute("DELETE FROM results WHERE run_id = 2")
        db.execute("UPDATE results SET outcome = 'not-run' WHERE run_id = 3")
        db.execute("UPDATE runs SET status = 'aborted', exit_code = 4 WHERE id = 3")
    done = farm("report", "--config", str(config))
    assert done.returncode == 0, done.stderr
    history = (tmp_path / "reports" / "history.html").read_text()
    heads = re.findall(r"<th>([^<]*)", history[history.find('<table id="runs">') :].split("</tr>")[0])
    assert heads[6:10] == ["as expected", "not", "infra-error", "not-run"], heads
    rows = {run_id: _history_row(history, run_id) for run_id in (1, 2, 3)}
    assert rows[1][8:10] == [["1"], ["0"]], rows[1]
    said = [" ".join(words) for words in rows[2][8:10]]
    assert said == ["0", "1 of them 1 with no result stored (its journal may hold them)"], rows[2]
    assert rows[3][8:10] == [["0"], ["1"]], rows[3]
    assert 'data-missing="1"' in history

    exported = farm("report", "--format", "json", "--run", "1", "--config", str(config))
    summary = json.loads(exported.stdout)["summary"]
    assert (summary["infra"], summary["not_run"], summary["infra_error"]) == (1, 0, 1), summary


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    nodes = Fleet(tmp_path / "fleet")
    try:
        nodes.add("a", CARDS["t4"])
        nodes.add("b", CARDS["t4"], start=False)  # down: its cells are infra-error
        yield nodes
    finally:
        nodes.stop()


def test_a_run_that_lost_a_node_names_it_and_the_command_that_reruns_just_its_cells(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Before: the run's last lines were the matrix and "2 as expected, 0 not, 2 infra; exit 4 (every verdict
    as expected, but some cells could not run (infra))": node b named only in each cell's reason. Figure: the
    line before the verdict names node b, its 2 infra-error cells and `farm verify --all --node b --config
    ...`; run as printed once b is back, that command plans b's two cells only and exits 0."""
    nodes = {n: fleet[n].farm_entry(tmp_path / f"work-{n}", connect_timeout=1) for n in ("a", "b")}
    variants = {"one": standin_variant("PASS", MIN75, "MIN_CC=75"), "two": standin_variant("PASS", MIN75, "MIN_CC=75")}
    root = tmp_path / "farm"
    config = write_farm(root, nodes, [standin_job("standin", variants)], retries=0)
    done = farm("verify", "--all", "--no-report", "--config", str(config), cwd=root, timeout=300)
    assert done.returncode == 4, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("run 1: 2 as expected, 0 not, 2 infra; exit 4"), done.stdout
    again = f"farm verify --all --node b --config {shlex.quote(str(config))}"
    assert lines[-2] == (
        f"run 1: 2 cells could not run on node b (2 infra-error; `farm show ID` says why); to rerun just them: {again}"
    ), done.stdout

    fleet["b"].start()
    rerun = farm(*shlex.split(again)[1:], "--no-report", cwd=root, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    cells = query(root / "results.db", "SELECT node, variant, outcome FROM results WHERE run_id = 2 ORDER BY variant")
    assert [tuple(c) for c in cells] == [("b", "one", "pass"), ("b", "two", "pass")], [tuple(c) for c in cells]
    assert "could not run" not in rerun.stdout, rerun.stdout


def _result(kernel: str, variant: str, node: str, outcome: Outcome) -> tuple[object, object, int]:
    cell = SimpleNamespace(kernel=kernel, variant=variant, node=node)
    return cell, SimpleNamespace(verdict=SimpleNamespace(outcome=outcome)), 0


def test_a_rerun_of_a_nodes_few_failed_cells_names_them_and_says_what_else_it_runs() -> None:
    """Figure: where a node lost some of its cells, the rerun names their kernel:variants (not the whole
    selection) on the nodes that lost them, and counts the cells with a verdict that it runs again too;
    one with no infra cell gets no such line, a stopped run one of its infra-error cells alone (review 267)."""
    from orchestrator.run.summary import rerun_line  # imported here: before the fix it did not exist

    results = [
        _result("k", "x", "a", Outcome.INFRA_ERROR),
        _result("k", "y", "a", Outcome.PASS),
        _result("k", "y", "b", Outcome.NOT_RUN),
        _result("k", "x", "b", Outcome.PASS),
        _result("k", "z", "c", Outcome.PASS),
    ]
    summary = RunSummary(run_id=7, outcomes=Counter({"pass": 3, "infra-error": 1, "not-run": 1}), results=results)  # type: ignore[arg-type]
    line = rerun_line(summary, ["k"], False, Path("/f/farm.yaml"))
    assert line == (
        "run 7: 2 cells could not run on nodes a, b (1 infra-error, 1 not-run; `farm show ID` says why); "
        "to rerun just them (and 2 cells of theirs that had a verdict): "
        "farm verify k:x k:y --node a --node b --config /f/farm.yaml"
    ), line
    summary.stopped = "SIGTERM"  # a stopped run's line names the nodes' infra-error alone (review 267)
    stopped = rerun_line(summary, ["k"], False, Path("/f/farm.yaml"))
    assert stopped is not None and "1 cell could not run on node a (1 infra-error;" in stopped, stopped
    assert rerun_line(RunSummary(run_id=8, results=results[1:2]), [], True, Path("f.yaml")) is None  # type: ignore[arg-type]
