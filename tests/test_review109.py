"""Review 109: one cell's provenance, whole where a reviewer reads one cell.

- A cell page (reports/cells/ID.html) named its run, node, card and driver but not the farm
  commit of its run (runs.farm_commit): the run page and the index's certificate said it, the
  page a reviewer opens for one cell did not.
- `farm show ID` printed neither the card's driver, the node's nvcc nor the run's farm commit,
  though all three are stored (the node's snapshot, the run): its provenance was the cell
  page's less the three a reviewer checks a certificate against.

Both now say them in the same words ("farm commit", "driver", "nvcc"), each escaped as the
node's other text is (node text and a commit string are stored input, not the farm's).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_report import TOY, certify, toy_identity
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.config.farm import load_farm
from orchestrator.report.site import render
from orchestrator.store.database import Store

COMMIT = "360c695840a3edc8dd9d5c01b0d6f6f02053c84e+dirty"
# what a hostile or broken node (or a forged database) could store: markup and a terminal escape
HOSTILE_DRIVER = "580.1\x1b[2J<b>x</b>"
HOSTILE_NVCC = "13.0\x1b]0;t\x07<i>"
HOSTILE_COMMIT = "c0ffee+dirty\x1b[31m<script>"


def _farm(root: Path, commit: str | None) -> tuple[Path, Any, int]:
    """A toy farm whose store holds one finished run (farm commit `commit`) with one pass
    of toy:plain on the `hopper` node's H100; the config file, the farm and the result's id."""
    config = toy_farm(root, source=TOY, cc="{exactly: '9.0'}")
    farm = load_farm(config)
    store = Store(farm.database_url)
    store.journal = None
    run_id = store.begin_run(
        trigger="test", farm_version="0", host="h", config_file="farm.yaml", selection="--all", farm_commit=commit
    )
    result_id = certify(store, run_id, toy_identity(farm), real=True)
    store.finish_run(run_id, "finished", 0)
    return config, farm, result_id


def _hostile(database: Path) -> None:
    with sqlite3.connect(database) as db:
        db.execute("UPDATE node_snapshots SET driver = ?, nvcc_version = ?", (HOSTILE_DRIVER, HOSTILE_NVCC))
        db.execute("UPDATE runs SET farm_commit = ?", (HOSTILE_COMMIT,))


def _cell_page(root: Path, farm: Any, result_id: int) -> str:
    store = Store(farm.database_url, create=False)
    render(store, root / "site", None, farm)
    return (root / "site" / "cells" / f"{result_id}.html").read_text()


def _provenance(page: str) -> str:
    return page.split("<h2>Provenance</h2>", 1)[1].split("</dl>", 1)[0]


def test_a_cell_page_names_its_runs_farm_commit(tmp_path: Path) -> None:
    _, farm, result_id = _farm(tmp_path, COMMIT)
    provenance = _provenance(_cell_page(tmp_path, farm, result_id))
    assert f"<dt>farm commit</dt><dd>{COMMIT}</dd>" in provenance, provenance
    # what was there stays: the card's driver and the node's nvcc
    assert "driver 580.1;" in provenance and "<dt>nvcc</dt><dd>nvcc (13.0.88)</dd>" in provenance, provenance


def test_a_cell_page_of_a_run_with_no_farm_commit_says_so(tmp_path: Path) -> None:
    _, farm, result_id = _farm(tmp_path, None)
    provenance = _provenance(_cell_page(tmp_path, farm, result_id))
    assert "<dt>farm commit</dt><dd>not recorded" in provenance, provenance


def test_a_cell_pages_commit_and_node_text_are_escaped(tmp_path: Path) -> None:
    _, farm, result_id = _farm(tmp_path, COMMIT)
    _hostile(Path(farm.database_url.removeprefix("sqlite:///")))
    page = _cell_page(tmp_path, farm, result_id)
    provenance = _provenance(page)
    assert "\x1b" not in page and "<script>" not in page and "<b>x" not in page and "<i>" not in page
    assert "<dt>farm commit</dt><dd>c0ffee+dirty\\x1b[31m&lt;script&gt;</dd>" in provenance, provenance
    assert "driver 580.1\\x1b[2J&lt;b&gt;x&lt;/b&gt;;" in provenance, provenance


def _show(config: Path, result_id: int) -> str:
    shown = CliRunner().invoke(main, ["show", str(result_id), "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    return shown.output


def test_farm_show_prints_the_driver_nvcc_and_farm_commit(tmp_path: Path) -> None:
    config, _, result_id = _farm(tmp_path, COMMIT)
    out = _show(config, result_id)
    assert re.search(r"^driver +580\.1$", out, re.M), out
    assert re.search(r"^nvcc +nvcc \(13\.0\.88\)$", out, re.M), out
    assert re.search(rf"^farm commit +{re.escape(COMMIT)}$", out, re.M), out


def test_farm_show_of_a_run_with_no_farm_commit_says_so(tmp_path: Path) -> None:
    config, _, result_id = _farm(tmp_path, None)
    assert re.search(r"^farm commit +not recorded", _show(config, result_id), re.M)


@pytest.mark.parametrize("said", ["driver", "nvcc", "farm commit"])
def test_farm_show_never_prints_a_nodes_or_commits_terminal_escapes(tmp_path: Path, said: str) -> None:
    config, farm, result_id = _farm(tmp_path, COMMIT)
    _hostile(Path(farm.database_url.removeprefix("sqlite:///")))
    out = _show(config, result_id)
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    line = re.search(rf"^{said} .*$", out, re.M)
    assert line is not None and "\\x1b" in line.group(0), out
