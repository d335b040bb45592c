"""Red team, round 91: a node removed from farm.yaml kept its place in the fleet.

1. A node taken out of farm.yaml (decommissioned, renamed, its card swapped under a new
   name) kept its green column in the matrix, its passes counted in the fleet's standing
   ("1 of 1 cells as expected"), certifying in the JSON and JUnit exports and the ledger,
   and `farm show` said nothing: only `stale_after_days` later was it marked stale. A
   reviewer certifying "this kernel runs on our fleet" read a machine the fleet no longer has.
2. Renamed in farm.yaml (the same host), the node showed two columns, the old one as
   current as the new.
A node that only another farm file on the same database lists (farms/hopper.yaml beside
farm.yaml) stays the fleet's: the Hopper evidence is never hidden by a local run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_report import TOY, certify, toy_identity
from toyfarm import toy_farm

from orchestrator.config.farm import Farm, load_farm
from orchestrator.report import export, grids
from orchestrator.report.model import ReportModel, collect
from orchestrator.report.site import render
from orchestrator.store.database import Store

BUILT = "g++ -O1 -o /w/toy kernels/toy.cpp"  # the toy job's build as run: no "job changed since"


def _farm(root: Path, extra_nodes: str = "") -> Farm:
    path = toy_farm(root, source=TOY, cc="{exactly: '9.0'}")
    path.write_text(path.read_text() + extra_nodes)
    return load_farm(path)


def _passed_on_hopper(farm: Farm, config_file: str) -> Store:
    """One finished run, of `config_file`, with a confirmed pass on node `hopper` (address
    farm@hopper:22), which the toy farm.yaml does not list."""
    store = Store(farm.database_url)
    store.journal = None
    run_id = store.begin_run(trigger="test", farm_version="0", host="h", config_file=config_file, selection="--all")
    certify(store, run_id, toy_identity(farm), real=True, build_command=BUILT)
    store.finish_run(run_id, "finished", 0)
    return store


def _model(store: Store, farm: Farm | None) -> ReportModel:
    with store.reading():
        return collect(store, None, farm)


def test_a_node_removed_from_farm_yaml_is_not_the_fleets_green(tmp_path: Path) -> None:
    farm = _farm(tmp_path)
    store = _passed_on_hopper(farm, str(farm.file))
    try:
        model = _model(store, farm)
        (r,) = model.results
        assert "not in farm.yaml" in model.departed.get("hopper", "")
        counts = grids.standing_counts(model)
        assert (counts["good"], counts["unconfirmed"]) == (0, 1)
        # `farm show` and the cell page say it (grids.since_flags)
        assert any("left the fleet" in flag for flag in grids.since_flags(model, r))
        exported = json.loads(export.as_json(model))
        (cell,) = exported["cells"]
        assert cell["certifies_nothing"] is True
        assert "not in farm.yaml" in (cell["not_in_fleet"] or "")
        assert "left the fleet" in export.junit(model)
        (entry,) = exported["ledger"]
        assert "9.0" in entry["capabilities"]  # the history stays: VERIFIED there, and flagged
        assert "not-in-fleet" in [f["kind"] for f in entry["flags"]]
        render(store, tmp_path / "reports", farm=farm)
    finally:
        store.close()
    index = (tmp_path / "reports" / "index.html").read_text()
    head = re.search(r'<th data-node="hopper".*?</th>', index, re.S)
    assert head is not None and "not in the fleet now: not in farm.yaml" in head.group(0)
    cell = re.search(r'<td class="([^"]*)" data-node="hopper"', index)
    assert cell is not None and cell.group(1).split()[:2] == ["good", "unconfirmed"]
    assert "node not in the fleet now" in index
    assert "0 of 1 cells as expected" in index
    node_page = (tmp_path / "reports" / "nodes" / "hopper.html").read_text()
    assert 'id="departed"' in node_page
    cell_page = (tmp_path / "reports" / "cells" / f"{r.id}.html").read_text()
    assert "left the fleet" in cell_page
    assert "not-in-fleet" in (tmp_path / "reports" / "kernels" / "toy.html").read_text()


def test_a_renamed_node_names_its_new_name(tmp_path: Path) -> None:
    farm = _farm(tmp_path, "  hopper-new:\n    host: hopper\n    user: farm\n")
    store = _passed_on_hopper(farm, str(farm.file))
    try:
        said = _model(store, farm).departed.get("hopper", "")
    finally:
        store.close()
    assert "hopper-new in it now has its host" in said


def test_a_node_another_farm_file_lists_stays_the_fleets(tmp_path: Path) -> None:
    """farms/hopper.yaml runs the lent H200 on farm.yaml's database: a render of farm.yaml keeps it green."""
    farm = _farm(tmp_path)
    other = tmp_path / "farms" / "hopper.yaml"
    other.parent.mkdir()
    other.write_text("database: sqlite:///../results.db\nnodes:\n  hopper:\n    host: 127.0.0.1\n")
    store = _passed_on_hopper(farm, str(other))
    try:
        kept = _model(store, farm)
        assert kept.departed == {} and grids.standing_counts(kept)["good"] == 1
        assert _model(store, None).departed == {}  # from the database alone: nothing to hold it against
        other.write_text("database: sqlite:///../results.db\nnodes:\n  h200:\n    host: 127.0.0.1\n")
        assert "hopper.yaml" in _model(store, farm).departed.get("hopper", "")
        other.unlink()  # a file this machine does not have (another one's) judges nothing
        assert _model(store, farm).departed == {}
    finally:
        store.close()


@pytest.mark.parametrize("last_run_of", ["this farm.yaml", "another farm file"])
def test_a_kernel_whose_job_file_was_removed_is_not_the_fleets_green(tmp_path: Path, last_run_of: str) -> None:
    """jobs/toy.yaml removed, kernels/toy.cpp left behind: toy's last run was of this very farm.yaml,
    so no other farm file runs it, and its pass stayed green, VERIFIED in the ledger. A kernel last
    run by another farm file (its own jobs) is left as recorded."""
    farm = _farm(tmp_path)
    store = Store(farm.database_url)
    store.journal = None
    config = str(farm.file) if last_run_of == "this farm.yaml" else str(tmp_path / "elsewhere.yaml")
    try:
        run_id = store.begin_run(trigger="test", farm_version="0", host="h", config_file=config, selection="--all")
        certify(store, run_id, toy_identity(farm), real=True, build_command=BUILT, node="here")
        store.finish_run(run_id, "finished", 0)
        job = (tmp_path / "jobs" / "toy.yaml").read_text()
        (tmp_path / "kernels" / "other.cpp").write_text(TOY)
        other = job.replace("kernel: toy", "kernel: other").replace("toy.cpp", "other.cpp")
        (tmp_path / "jobs" / "other.yaml").write_text(other)
        (tmp_path / "jobs" / "toy.yaml").unlink()
        model = _model(store, load_farm(farm.file))
    finally:
        store.close()
    (entry,) = [e for e in model.ledgers if e.kernel == "toy"]
    (why,) = model.rejudged.values() or [None]
    if last_run_of == "another farm file":
        assert why is None and grids.standing_counts(model)["good"] == 1
        assert "removed" not in [kind for kind, _text in entry.flags]
        return
    assert why is not None and "no job of" in why and "its last run was of that file" in why
    assert grids.standing_counts(model)["good"] == 0
    assert "removed" in [kind for kind, _text in entry.flags]
