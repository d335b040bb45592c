"""Review 137: a pass whose code ran unconfined on the farm's own machine certifies nothing.

Red-team round 135 left open that on a `local` node a kernel the node cannot confine (`runner:
shell`, a node kernel without Landlock) runs as the farm's own Unix user and can write results.db,
its journal and the reports by path: forge any verdict or certificate.

Before: such a pass on a card the driver confirmed certified like any other (Store._certifying
looked at the card, the inputs and the run alone); the cell page said only that the kernel "ran
unconfined (...): it could have written other cells' files", and the matrix, the JSON export and
`farm show` read it as a plain pass. Nothing stored said so but that sentence of its stage detail.

After: the result is stored with `farm_writable` (migration 0016, which fills it for earlier rows
from their snapshot's transport and that sentence). It keeps its outcome (its numbers did pass) but
certifies nothing by the one rule (store/certifying.py) and is grey as a stand-in's pass is
(report.model.unconfirmed); the cell page, the index matrix, the kernel page (a flag per CC), the
JSON export (`certifies_nothing_why`), JUnit and `farm show` say why: "ran unconfined on the
farm's own machine as the farm's user, who can write results.db". An SSH node's unconfined kernel
cannot reach the database: unchanged. A local node's python3 runner on a kernel with Landlock
confines it: farm_writable stays false, so such a pass on a real card still certifies.
"""

from __future__ import annotations

import html
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from alembic import command
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, query
from sqlalchemy import create_engine, text
from test_metrics import alembic_config, new_run, result_record
from toyfarm import toy_farm

from orchestrator.farm_writable import WHY, farm_writable
from orchestrator.store.database import Store
from orchestrator.store.records import SnapshotRecord


def _store(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None
    return store


def test_a_pass_that_ran_unconfined_on_the_farms_machine_certifies_nothing(tmp_path: Path) -> None:
    """Two passes of the same inputs on a card the driver confirmed, in a finished run: the one that
    ran unconfined on the farm's own machine is no certificate, and the kernel page can name it."""
    store = _store(tmp_path)
    run_id, snapshot = new_run(store)
    backed = store.add_result(result_record(run_id, snapshot))
    forged = store.add_result(replace(result_record(run_id, snapshot, node="local"), farm_writable=True))
    store.finish_run(run_id, "finished", 0)
    assert [row.id for row in store.certifying_passes()] == [backed]
    groups, _days = store.certifying_groups()
    assert [(g.passes, g.first_id, g.last_id) for g in groups] == [(1, backed, backed)]
    named = store.farm_writable_passes([("k", "b" * 64)])
    assert [(p.cc, p.passes, p.last_id) for p in named] == [("9.0", 1, forged)]
    # grey on every page, as a stand-in card's pass is
    assert store.unconfirmed_results([run_id]) == {forged}
    assert store.unconfirmed_reasons([run_id]) == {run_id: (1, 0, 1, 0)}


def test_only_the_local_transport_makes_an_unconfined_run_farm_writable() -> None:
    assert farm_writable("local", True)
    assert not farm_writable("local", False)  # the python3 runner confined it (Landlock)
    assert not farm_writable("ssh", True)  # its kernel cannot reach the farm's database
    assert not farm_writable("slurm", True)


def test_the_migration_marks_earlier_unconfined_local_passes(tmp_path: Path) -> None:
    """0016 fills farm_writable for rows stored before it: a local node's result whose stage detail
    says it ran unconfined; not an SSH node's, nor a confined local one's."""
    store = _store(tmp_path)
    run_id, ssh = new_run(store)
    local = store.add_snapshot(
        SnapshotRecord(run_id=run_id, node="l", transport="local", address="", gpu_count=1, real_gpu=True)
    )
    unconfined = {"run": {"status": "ok", "detail": "the kernel ran unconfined (no Landlock): it could have..."}}
    ids = [
        store.add_result(replace(result_record(run_id, local, node="l"), stage_details=unconfined)),
        store.add_result(replace(result_record(run_id, local, node="l"), stage_details={"run": {"detail": ""}})),
        store.add_result(replace(result_record(run_id, ssh), stage_details=unconfined)),
    ]
    store.close()
    db = tmp_path / "results.db"
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0015")
    with engine.begin() as connection:
        assert "farm_writable" not in [r[1] for r in connection.execute(text("pragma table_info(results)"))]
        command.upgrade(alembic_config(connection), "head")
    engine.dispose()
    rows = query(db, "SELECT id, farm_writable FROM results ORDER BY id")
    assert [(r["id"], r["farm_writable"]) for r in rows] == [(ids[0], 1), (ids[1], 0), (ids[2], 0)]


def _verified(root: Path, runner: str) -> Path:
    """The toy farm's local node (a stand-in card on PATH) under `runner`: its results.db."""
    config = toy_farm(root)
    config.write_text(config.read_text() + f"    runner: {runner}\n")
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}", "LANG": "C.UTF-8"}
    done = farm("verify", "--all", "--config", str(config), cwd=root, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "results.db"


def test_a_shell_runner_pass_on_the_local_node_says_why_it_certifies_nothing(tmp_path: Path) -> None:
    """End to end: `runner: shell` on the farm's own machine. The pass stands, stored farm_writable,
    and the cell page, the index, the JSON export and `farm show` say why it certifies nothing."""
    db = _verified(tmp_path, "shell")
    rows = query(db, "SELECT id, outcome, farm_writable FROM results")
    assert [(r["outcome"], r["farm_writable"]) for r in rows] == [("pass", 1)]
    result_id = rows[0]["id"]
    config = tmp_path / "farm.yaml"
    reports = tmp_path / "reports"
    page = html.unescape((reports / "cells" / f"{result_id}.html").read_text())
    assert f"{WHY}: certifies nothing" in page
    assert f"{WHY}: certifies nothing" in html.unescape((reports / "index.html").read_text())
    shown = farm("show", str(result_id), "--config", str(config), cwd=tmp_path)
    assert f"ran       {WHY}: certifies nothing" in shown.stdout, shown.stdout + shown.stderr
    exported = tmp_path / "farm.json"
    assert farm("report", "--format", "json", "--out", str(exported), "--config", str(config)).returncode == 0
    cells = [c for c in json.loads(exported.read_text())["cells"] if c["id"] == result_id]
    assert cells and cells[0]["certifies_nothing"] is True and cells[0]["farm_writable"] is True, cells
    assert WHY in cells[0]["certifies_nothing_why"]


@pytest.mark.skipif(shutil.which("python3") is None, reason="the python3 runner needs python3")
def test_a_confined_local_pass_is_not_farm_writable(tmp_path: Path) -> None:
    """The python3 runner on this machine's kernel (Landlock) confines the kernel: the pass is not
    farm_writable, so on a confirmed card it would certify (here a stand-in's never does)."""
    db = _verified(tmp_path, "auto")
    rows = query(db, "SELECT outcome, farm_writable, stage_details FROM results")
    assert [(r["outcome"], r["farm_writable"]) for r in rows] == [("pass", 0)], [dict(r) for r in rows]
    assert "ran unconfined" not in rows[0]["stage_details"]
