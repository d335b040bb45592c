"""Red-team 216: a certificate made by a farm whose tree was not its commit read as that commit.

The farm records the commit it ran at, with "+dirty" where a tracked file differed from it (the
lent GPU machine's runs 140-142: a working tree over an older commit's metadata). The index's
certificate line, its run line, the run page and history.html cut the value to 12 characters,
and the "+dirty" went with the cut: a certificate made by uncommitted code read as made at a
commit anyone could check out. Figure: every page that names the run's farm commit keeps "+dirty"."""

from __future__ import annotations

from pathlib import Path

from test_report import TOY, certify, toy_identity
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.report.site import render
from orchestrator.store.database import Store

COMMIT = "e51130cde2eb876e7817aea96e6e163606ee1e08+dirty"


def test_a_dirty_farm_tree_is_said_wherever_the_farm_commit_is_shown(tmp_path: Path) -> None:
    """Before: index (run line and certificate), run page and history said `e51130cde2eb`, no
    "+dirty". Figure: each says `e51130cde2eb+dirty`."""
    farm_ = load_farm(toy_farm(tmp_path, source=TOY, cc="{exactly: '9.0'}"))
    store = Store(farm_.database_url)
    store.journal = None
    run_id = store.begin_run(
        trigger="test", farm_version="0", host="h", config_file="farm.yaml", selection="--all", farm_commit=COMMIT
    )
    certify(store, run_id, toy_identity(farm_), real=True, binary_sha256="b1" * 32)
    store.finish_run(run_id, "finished", 0)
    render(store, tmp_path / "reports", run_id, farm_)
    store.close()
    reports = tmp_path / "reports"
    index = (reports / "index.html").read_text()
    certificate = index.split('data-cc="9.0"', 1)[1].split("</span>", 1)[0]
    assert "farm at e51130cde2eb+dirty" in certificate, certificate
    assert "at e51130cde2eb+dirty on h" in index.split('class="meta"', 1)[1][:600]
    assert "<code>e51130cde2eb+dirty</code>" in (reports / "runs" / f"{run_id}.html").read_text()
    assert "<code>e51130cde2eb+dirty</code>" in (reports / "history.html").read_text()
    for page in reports.rglob("*.html"):
        text = page.read_text()
        assert "e51130cde2eb<" not in text and "e51130cde2eb," not in text and "e51130cde2eb " not in text, page
