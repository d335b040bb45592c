"""Red-team round 48: a bisection's runs test old commits; the fleet's history, "what
changed", "unstable" and the kernel pages' grids must never take them for today's."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from test_bisect import git
from test_redteam46 import toy_repo
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.config.farm import load_farm
from orchestrator.store.database import Store


def bisected_farm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """Run 1 green at the good commit; the build broken; run 2 red at HEAD; a `farm bisect`
    (runs 3: HEAD, bad; 4: the good commit, as expected). Returns (root, farm.yaml, good)."""
    root, config, good = toy_repo(tmp_path, monkeypatch)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0  # run 1
    (root / "kernels" / "toy.cpp").write_text("int main( {\n")
    git(root, "commit", "-q", "-am", "toy: break the build")
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1  # run 2, red
    walk = ["bisect", "toy:plain", "--node", "here", "--good", good, "--bad", "HEAD", "--config", str(config)]
    done = cli.invoke(main, walk)  # runs 3 (HEAD) and 4 (the good commit)
    assert done.exit_code == 0, done.output
    return root, config, good


def test_a_bisections_old_green_is_no_flip_in_what_changed_nor_the_kernel_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fleet's history took a bisection's runs for its own: after `farm bisect` (its last
    run, 4, tested the old good commit: compile-only, as expected), the next nightly at HEAD,
    red as run 2 was, was listed under "what changed" as `unstable` ("3 flips in the last 10
    runs": pass, fail, fail, pass, fail) against "compile-only (run 4)", and the kernel page's
    history grid showed run 4 green between the two red nights: the cell looked flaky, not
    broken since run 2. It is still-failing against run 2; the grid has the fleet's runs only."""
    root, config, _good = bisected_farm(tmp_path, monkeypatch)
    assert CliRunner().invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1  # run 5, red
    index = (root / "reports" / "index.html").read_text()
    listed = re.findall(r'data-change="([^"]+)"', index)
    assert listed == ["still-failing"], listed
    assert "(run 2)" in index
    kernel = (root / "reports" / "kernels" / "toy.html").read_text()
    heads = re.findall(r'<th><a href="../(?:index|runs/\d+)\.html">(\d+)</a></th>', kernel)
    assert heads == ["1", "2", "5"], heads
    cell = re.search(r'href="cells/(\d+)\.html">build-fail', index)
    assert cell is not None
    page = (root / "reports" / "cells" / f"{cell.group(1)}.html").read_text()
    assert "run 4" not in page and "still-failing" in page


def test_a_bisections_cell_page_says_which_old_commit_it_tested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bisection's cell page (here its good end's, run 4, at an old commit) read as any
    nightly's: the old commit's compile-only green, "fixed (was build-fail in run 3)" against
    the cell's earlier results, and no word that it was not the kernel's sources now (`farm
    show` says "a bisection's run"). A reviewer opening it (the ledger, `farm report --run 4`)
    took it for the cell's fix, as that report's "what changed" did ("fixed"). Both say now
    that it is a bisection's run of that commit, and compare it with no fleet run."""
    _root, config, good = bisected_farm(tmp_path, monkeypatch)
    done = CliRunner().invoke(main, ["report", "--run", "4", "--out", str(tmp_path / "site"), "--config", str(config)])
    assert done.exit_code == 0, done.output
    index = (tmp_path / "site" / "index.html").read_text()
    assert "data-change=" not in index  # its index listed "fixed: build-fail (run 2) → compile-only"
    assert f"a bisection's run of commit {good}" in html.unescape(index)
    own = (tmp_path / "site" / "runs" / "4.html").read_text()
    cell = re.search(r'href="../cells/(\d+)\.html">compile-only', own)
    assert cell is not None, own
    page = html.unescape((tmp_path / "site" / "cells" / f"{cell.group(1)}.html").read_text())
    assert f"a bisection's run of commit {good}" in page, page[:3000]
    assert "fixed" not in page


def test_a_cell_page_written_while_its_run_ran_is_written_again_once_it_finished(tmp_path: Path) -> None:
    """A cell page's stamp was its result and its run's start, not the run's status: a page
    rendered while the run was still going (`farm report` beside a nightly, or the run's own
    render at its start racing its first cells) said "run 1 had not finished when this page
    was written: certifies nothing", greyed, and every later render, the run's own at its end
    included, found the stamp on disk and left it so for good."""
    config = toy_farm(tmp_path)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    store = Store(load_farm(config).database_url)
    with store.engine.begin() as db:  # as a render during the run saw it
        db.execute(text("UPDATE runs SET status = 'running' WHERE id = 1"))
    page = tmp_path / "reports" / "cells" / "1.html"
    page.unlink()  # first written by that render
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    assert "had not finished" in page.read_text()
    with store.engine.begin() as db:  # the run ends
        db.execute(text("UPDATE runs SET status = 'finished' WHERE id = 1"))
    store.close()
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    assert "had not finished" not in page.read_text()


def test_a_bisections_runs_are_listed_apart_in_the_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """history.html listed a bisection's runs among the fleet's nights, each an old commit's
    (its good end's green read as a night's "1 as expected"), and those newer than the fleet's
    latest run not at all until the next `farm verify`: the walk that was rendered beside
    run 2 left no word of its runs 3 and 4. The fleet's runs are listed alone now; the
    bisections' below them, apart, each with the commit it tested."""
    root, _config, good = bisected_farm(tmp_path, monkeypatch)
    page = (root / "reports" / "history.html").read_text()
    fleet, _, apart = page.partition('id="bisections"')
    assert re.findall(r'<tr data-run="(\d+)">', fleet) == ["2", "1"], fleet
    assert re.findall(r'<tr data-bisection-run="(\d+)">', apart) == ["4", "3"], apart
    assert f"at {good}" in apart


def test_a_subset_run_after_a_red_night_does_not_read_as_the_fleet_green(tmp_path: Path) -> None:
    """After a red `farm verify --all` (toy:broken build-fail, run 2), a developer's
    `farm verify toy:plain` (run 3) became the site's headline: "Run 3: 1 of 1 cells as
    expected", "Nothing: every cell has the same outcome", and history.html's row 3 green
    like a whole night's, with no word that it tested one cell of two: the regression was
    left to one red cell of the matrix. The index now says the fleet's standing beside the
    run's (1 of 2 as expected, 1 not), and history.html what each run tested."""
    config = toy_farm(tmp_path)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    toy_farm(tmp_path, broken="fails")
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1  # run 2, red
    assert cli.invoke(main, ["verify", "toy:plain", "--config", str(config)]).exit_code == 0  # run 3
    index = (tmp_path / "reports" / "index.html").read_text()
    fleet = re.search(r'<p id="fleet">(.*?)</p>', index, re.DOTALL)
    assert fleet is not None, index[:3000]
    said = re.sub(r"<[^>]+>", "", fleet.group(1))
    assert "1 of 2 cells as expected, 1 not as expected" in said, said
    assert "run 3 tested 1 of them" in said.lower(), said
    history = (tmp_path / "reports" / "history.html").read_text()
    row = re.search(r'<tr data-run="3">(.*?)</tr>', history, re.DOTALL)
    assert row is not None and "toy:plain" in row.group(1), history[-1500:]
