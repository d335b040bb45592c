"""Review round 259: a night operator's walk through runs that went wrong midway.

Found (before/after):
- `farm verify` SIGKILLed mid-run on two real sshd nodes: `farm report`'s run page listed only the cells
  that had finished (two grey passes) and said "2 as expected, 0 not, 0 infra": the two cells it never
  finished were nowhere on the page (the JSON export and JUnit listed them). Now they are in its matrix,
  not-run, "no result yet", and the counts say "0 infra-error, 2 not-run (of them 2 with no result yet".
- A run whose SQLite database was locked past its wait (exit 5, its records in its journal) stayed
  `running`; its banner said only that the next `farm verify` stores it aborted, its unfinished cells
  not-run, while that verify takes their results from the journal first (they were not lost). Now the
  banner names the failed database and the journal (`farm import`).
- A run page's counts lumped not-run with infra-error ("1 infra" for a broken node's cell and a stop's
  alike). Now infra-error and not-run are counted apart.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from farm_cli import farm, farm_argv, farm_env
from faults import faults_job, faults_variant, wait_for, write_fault_farm
from nodes import CARDS, Fleet, query

from orchestrator.report import grids, unfinished_cells

VARIANTS = {
    "fast": faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=0"),
    "slow": faults_variant("SLOWPASS", {"min": "7.5"}, "SLEEP_S=120"),
}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    nodes = Fleet(tmp_path / "fleet")
    try:
        nodes.add("a", CARDS["t4"])
        nodes.add("b", CARDS["t4"])
        yield nodes
    finally:
        nodes.stop()


def _stored(db: Path, at_least: int) -> bool:
    try:
        return len(query(db, "SELECT id FROM results")) >= at_least
    except Exception:  # not made yet, or its first write under way
        return False


def test_a_sigkilled_runs_page_lists_the_cells_it_never_finished(fleet: Fleet, tmp_path: Path) -> None:
    """Before: the run page of a run whose farm was SIGKILLed after its two fast cells showed those two
    passes alone, "2 as expected, 0 not, 0 infra". Figure: its matrix holds the two slow cells as not-run
    with no result (under each node's card, no card-less column), its counts split infra-error from not-run;
    the JSON export and JUnit say it is not complete and exit non-zero."""
    nodes = {n: fleet[n].farm_entry(tmp_path / f"work-{n}", build_jobs=1) for n in ("a", "b")}
    root = tmp_path / "farm"
    write_fault_farm(root, nodes, [faults_job(VARIANTS, timeout=180)], retries=0)
    process = subprocess.Popen(
        farm_argv("verify", "--all", "--config", str(root / "farm.yaml")),
        cwd=root,
        env=farm_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: _stored(root / "results.db", 2), 180, "the fast cells' results")
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # no chance to close its run
        process.wait()
    assert [tuple(r) for r in query(root / "results.db", "SELECT status FROM runs")] == [("running",)]
    assert {r["variant"] for r in query(root / "results.db", "SELECT variant FROM results")} == {"fast"}

    done = farm("report", "--config", str(root / "farm.yaml"), cwd=root, timeout=120)
    assert done.returncode == 0, done.stderr
    page = (root / "reports" / "runs" / "1.html").read_text()
    shown = page[page.find("<h1>") :][:3000]  # the page's body, not its style sheet
    missing = re.findall(r'<td class="infra" data-no-result="1" data-node="(\w)" data-device="([^"]*)"', page)
    assert sorted(missing) == [("a", "Tesla T4"), ("b", "Tesla T4")], shown
    assert page.count('data-cell="faults:slow"') == 2, shown
    assert page.count("<th data-node=") == 2, page  # the no-result cells under the nodes' cards
    counts = re.search(r'<span id="counts">([^<]*)</span>', page)
    assert counts is not None, shown
    assert counts.group(1).startswith(
        "2 as expected, 0 not, 0 infra-error, 2 not-run (of them 2 with no result stored"
    ), shown
    assert 'id="incomplete"' in page

    export = farm("report", "--format", "json", "--config", str(root / "farm.yaml"), cwd=root, timeout=120)
    data = json.loads(export.stdout)
    assert export.returncode != 0 and data["complete"] is False and data["summary"]["not_run"] == 2, data["summary"]
    junit = farm("report", "--format", "junit", "--config", str(root / "farm.yaml"), cwd=root, timeout=120)
    assert junit.returncode != 0 and 'name="complete" value="false"' in junit.stdout, junit.stdout


def test_a_run_pages_counts_tell_not_run_from_infra_error() -> None:
    """Before: "0 not, 2 infra" for one node's infra-error and one stopped cell. Figure: "1 infra-error,
    1 not-run"; a planned cell with no row counts among the not-run, said apart."""
    from orchestrator.report.site import _env  # the site's own filters render the page

    run = SimpleNamespace(
        id=3,
        status="aborted",
        exit_code=4,
        selection="--all",
        config_file="/f/farm.yaml",
        started_at=datetime(2026, 12, 7, tzinfo=UTC),
        trigger="manual",
        farm_commit=None,
    )
    counts = unfinished_cells.page_counts({"good": 1, "bad": 0, "infra": 2}, 1, [("k", "v", "n", "T4")])
    assert counts == {"good": 1, "bad": 0, "infra_error": 1, "not_run": 2, "missing": 1}, counts
    text = (
        _env()
        .get_template("run.html.j2")
        .render(run=run, counts=counts, matrix=[], heads=[], missing_words=unfinished_cells.no_result_words("aborted"))
    )
    said = re.search(r'<span id="counts">([^<]*)</span>', text)
    assert said is not None, text
    assert (
        said.group(1)
        == "1 as expected, 0 not, 1 infra-error, 2 not-run (of them 1 with no result: the run did not finish)"
    )


def test_a_cell_planned_before_its_probe_goes_under_its_nodes_card() -> None:
    """Figure: a planned cell with no card (planned before the probe) is placed under its node's only card;
    a node with two cards, or none on the page, keeps it card-less (a column of its own)."""
    columns = {("a", "Tesla T4"), ("b", "A100"), ("b", "H100")}
    placed = unfinished_cells.place([("k", "v", "a", ""), ("k", "v", "b", ""), ("k", "v", "c", "")], columns)
    assert placed == [("k", "v", "a", "Tesla T4"), ("k", "v", "b", ""), ("k", "v", "c", "")], placed


def test_an_earlier_runs_page_shows_its_missing_cells_unlinked() -> None:
    """Figure: on a run page not linked (an earlier run), a no-result cell is not-run, carries no link
    and no result id, and sits beside the run's own cells in the row of its variant."""
    cells = {("k", "fast", "a", "T4"): ("pass", 5)}
    rows = grids.run_matrix(cells, [("a", "T4")], False, {5}, frozenset(), [("k", "slow", "a", "T4")], "no result")
    by_variant = {v: str(html) for _k, v, html in rows}
    assert set(by_variant) == {"fast", "slow"}, rows
    assert by_variant["slow"] == '<td class="infra" data-no-result="1">not-run<small>no result</small></td>'
    assert "certifies nothing" in by_variant["fast"]


def test_a_running_runs_banner_names_the_journal() -> None:
    """Before: a run left `running` by a database locked past its wait (exit 5) read "the next farm verify
    stores it aborted, its unfinished cells not-run", not that the journal holds their results. Figure: the
    banner names a failed database and that the next verify takes the journal's records (farm import)."""
    from orchestrator.report.site import _env

    run = SimpleNamespace(id=2, status="running", exit_code=None, selection="--all", config_file="/f/farm.yaml")
    text = _env().get_template("incomplete.html.j2").render(run=run)
    assert "its database failed, exit 5" in text, text
    assert "takes from the run's journal what the database lacks" in text and "farm import" in text, text
    assert "stores it aborted" in text, text
