"""Review 141: every place that says why a cell certifies nothing gives the true reason, and all of them.

Review 137 made a pass that ran unconfined on a `local` node (as the farm's own user, who can write
results.db) certify nothing, as a stand-in card's does. Before this review, its words lagged:
- history.html counted it "on a card the NVIDIA driver did not confirm" (false for a real card);
- the index matrix named one reason only: a farm-writable pass on a stand-in card lost "stand-in
  card", and one in a run that did not finish said only that;
- the JUnit export's skipped message named the first reason only (card, or the run that did not
  finish, or the job that changed since), and the JSON's `certifies_nothing_why` named the card and
  the farm-writable run alone: a cell of a run that did not finish certified nothing with no why;
- the run's own lines (each cell's, the summary, `farm verify`'s last line a cron mail quotes) said
  nothing of it: a night operator's log read "ok   pass" and "N as expected" as green.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from farm_cli import farm
from junitparser import JUnitXml
from nodes import CARDS, nvidia_smi_script
from test_metrics import new_run, result_record
from toyfarm import toy_farm

from orchestrator.cli.verify import verdict_line
from orchestrator.farm_writable import WHY
from orchestrator.outcomes import Outcome
from orchestrator.progress import PlainListener, describe_cell
from orchestrator.report import export
from orchestrator.report.model import collect
from orchestrator.report.site import render
from orchestrator.report.unbacked import STANDIN
from orchestrator.run.summary import RunSummary
from orchestrator.store.database import Store
from orchestrator.store.records import SnapshotRecord

UNFINISHED = "which did not finish (aborted)"


def _one_cell(tmp_path: Path, *, real_gpu: bool, status: str) -> tuple[Store, int, int]:
    """A run on a local node holding one farm-writable expected-refusal (the contract refuses)."""
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None
    run_id, _ssh = new_run(store)
    local = store.add_snapshot(
        SnapshotRecord(run_id=run_id, node="here", transport="local", address="", gpu_count=1, real_gpu=real_gpu)
    )
    refused = replace(
        result_record(run_id, local, node="here", outcome=Outcome.EXPECTED_REFUSAL.value),
        expected=Outcome.EXPECTED_REFUSAL.value,
        contract_expected=Outcome.EXPECTED_REFUSAL.value,
        real_gpu=real_gpu,
        farm_writable=True,
    )
    result_id = store.add_result(refused)
    store.finish_run(run_id, status, 0)
    return store, run_id, result_id


def _said(store: Store, run_id: int, result_id: int, reports: Path) -> dict[str, str]:
    """What each place says of the cell: the JUnit skipped message, the JSON's why, the index
    matrix's cell, the cell page's outcome, history.html's row of the run."""
    model = collect(store, run_id)
    (suite,) = JUnitXml.fromstring(export.junit(model))
    (skipped,) = [r for case in suite for r in case.result if r._tag == "skipped"]
    (cell,) = json.loads(export.as_json(collect(store, run_id)))["cells"]
    assert cell["certifies_nothing"] is True, cell
    render(store, reports, run_id)
    index = html.unescape((reports / "index.html").read_text())
    matrix = re.search(r'<td class="good unconfirmed"[^>]*data-cell="k:v".*?</td>', index, re.S)
    page = html.unescape((reports / "cells" / f"{result_id}.html").read_text())
    outcome = re.search(r'id="outcome">.*?</td>', page, re.S)
    history = html.unescape((reports / "history.html").read_text())
    row = re.search(rf'<tr data-run="{run_id}">.*?</tr>', history, re.S)
    assert matrix and outcome and row, (index, page, history)
    return {
        "junit": skipped.message,
        "json": cell["certifies_nothing_why"] or "",
        "matrix": matrix.group(),
        "page": outcome.group(),
        "history": row.group(),
    }


def test_a_farm_writable_refusal_on_a_real_card_names_no_stand_in(tmp_path: Path) -> None:
    """A confirmed card on the farm's own machine: every place says where it ran, none a stand-in."""
    store, run_id, result_id = _one_cell(tmp_path, real_gpu=True, status="finished")
    try:
        said = _said(store, run_id, result_id, tmp_path / "reports")
    finally:
        store.close()
    for place, words in said.items():
        assert WHY in words, (place, words)
        assert "stand-in" not in words and "did not confirm" not in words, (place, words)


def test_a_farm_writable_refusal_on_a_stand_in_in_an_aborted_run_names_all_three(tmp_path: Path) -> None:
    """A stand-in card, the farm's own machine, a run that did not finish: each place says all three."""
    store, run_id, result_id = _one_cell(tmp_path, real_gpu=False, status="aborted")
    try:
        said = _said(store, run_id, result_id, tmp_path / "reports")
    finally:
        store.close()
    card = {"junit": STANDIN, "json": STANDIN, "matrix": "stand-in card", "page": STANDIN}
    finished = {"junit": UNFINISHED, "json": UNFINISHED, "matrix": "did not finish", "page": "did not finish"}
    for place in card:
        assert WHY in said[place] and card[place] in said[place] and finished[place] in said[place], (place, said)
    assert WHY in said["history"] and "did not confirm" in said["history"], said["history"]


def _cell_result(*, farm_writable: bool, standin: bool) -> tuple[SimpleNamespace, SimpleNamespace]:
    """A pass as the run's listeners get it (cell, CellResult): only the fields they read."""
    verdict = SimpleNamespace(outcome=Outcome.PASS, reason="", failed_stage=None)
    result = SimpleNamespace(
        verdict=verdict,
        gpu=SimpleNamespace(verified=not standin),
        stages=[],
        expectation=SimpleNamespace(label="pass"),
        farm_writable=farm_writable,
    )
    return SimpleNamespace(label="k:v@here"), result


def test_the_runs_own_lines_say_a_farm_writable_pass_certifies_nothing() -> None:
    """Each cell's line, the summary line and `farm verify`'s last line, on a real card."""
    cell, result = _cell_result(farm_writable=True, standin=False)
    line = describe_cell(cell, result, 7)  # type: ignore[arg-type]
    assert WHY in line and "certifies nothing" in line and "stand-in" not in line, line
    summary = RunSummary(run_id=3, results=[(cell, result, 7)])  # type: ignore[list-item]
    summary.outcomes["pass"] = 1
    assert f"1 of them {WHY}: certify nothing" in verdict_line(summary), verdict_line(summary)
    assert "stand-in" not in verdict_line(summary)
    lines: list[str] = []
    listener = PlainListener(verdict=True)  # a --log file's last line
    listener._line = lines.append  # type: ignore[method-assign]
    listener.run_finished(summary)
    assert f"1 of them {WHY}: certify nothing" in lines[-1] and "stand-in" not in lines[-1], lines
    # a real card on an SSH node (or a confined local run) says nothing of it
    cell, plain = _cell_result(farm_writable=False, standin=False)
    assert "certifies nothing" not in describe_cell(cell, plain, 8)  # type: ignore[arg-type]


def test_both_reasons_on_the_cells_line_where_both_apply() -> None:
    cell, result = _cell_result(farm_writable=True, standin=True)
    line = describe_cell(cell, result, 7)  # type: ignore[arg-type]
    assert "stand-in" in line and WHY in line and "certifies nothing" in line, line


def test_a_shell_runner_night_on_the_local_node_says_so_in_its_log(tmp_path: Path) -> None:
    """End to end: `farm verify` on the local node with `runner: shell` (a stand-in card on PATH):
    its cell's line and its last line say the pass ran where the farm's database can be written."""
    config = toy_farm(tmp_path)
    config.write_text(config.read_text() + "    runner: shell\n")
    smi = tmp_path / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}", "LANG": "C.UTF-8"}
    done = farm("verify", "--all", "--config", str(config), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    passed = [line for line in lines if "] ok   pass" in line]
    assert passed and all(WHY in line for line in passed), lines
    (last,) = [line for line in lines if line.startswith("run 1: 1 as expected")]  # verdict_line's, at the end
    assert f"1 of them {WHY}: certify nothing" in last and "stand-in" in last, lines
