"""Red-team round 46: a finished, backed pass is the only green; here, ways an older or
unfinished run still looked current or green."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_bisect import git
from toyfarm import toy_farm

from orchestrator import bisect as bisect_mod
from orchestrator.cli import main
from orchestrator.config.farm import load_farm
from orchestrator.report import site
from orchestrator.store.database import Store


def toy_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """The toy farm in a git repository of one commit, the current folder: (root, farm.yaml, that commit)."""
    root = tmp_path / "toy"
    config = toy_farm(root)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.chdir(root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "farm.yaml", "jobs", "kernels")
    git(root, "commit", "-q", "-m", "toy")
    return root, config, git(root, "rev-parse", "HEAD")


def summary_of(index: Path) -> str:
    found = re.search(r'<p id="summary">(.*?)</p>', index.read_text(), re.DOTALL)
    return found.group(1) if found else index.read_text()


def test_a_bisection_does_not_render_its_run_over_a_run_started_after_its_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`farm bisect` rendered the site for its first bad commit's run after its walk had
    released the run lock: a nightly `farm verify` that started meanwhile (stored, its start
    rendered) had its index overwritten by the bisection's older run, whose standing is the
    night before's green; killed then, the nightly stood behind that index."""
    root, config, good = toy_repo(tmp_path, monkeypatch)
    done = CliRunner().invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 0, done.output  # run 1: green, the fleet's standing
    (root / "kernels" / "toy.cpp").write_text("int main( {\n")
    git(root, "commit", "-q", "-am", "toy: break the build")
    url = load_farm(config).database_url
    nightly: list[int] = []
    taken = bisect_mod.run_lock

    @contextlib.contextmanager
    def lock_then_a_nightly_starts(*args: object, **kwargs: object) -> Iterator[object]:
        with taken(*args, **kwargs) as held:  # type: ignore[arg-type]
            yield held
        store = Store(url)  # the lock is free: a nightly verify stores its run and renders its start
        nightly.append(
            store.begin_run(trigger="cron", farm_version="0", host="h", config_file=str(config), selection="--all")
        )
        site.render(store, root / "reports", nightly[0])
        store.close()

    monkeypatch.setattr(bisect_mod, "run_lock", lock_then_a_nightly_starts)
    done = CliRunner().invoke(
        main, ["bisect", "toy:plain", "--node", "here", "--good", good, "--bad", "HEAD", "--config", str(config)]
    )
    assert done.exit_code == 0, done.output
    summary = summary_of(root / "reports" / "index.html")
    assert f"Run {nightly[0]}" in summary, summary


def test_a_bisections_last_run_of_an_old_commit_is_not_the_latest_run_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`farm report` and its exports took the highest run id as the latest run: after a
    `farm bisect`, whose last run tested the old, good commit, `farm report --format junit`
    exited 0 and the site's summary read "1 of 1 cells as expected", while the fleet's
    latest run (`farm verify` at HEAD) had failed: an old commit's green as current."""
    root, config, good = toy_repo(tmp_path, monkeypatch)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0  # run 1
    (root / "kernels" / "toy.cpp").write_text("int main( {\n")
    git(root, "commit", "-q", "-am", "toy: break the build")
    red = cli.invoke(main, ["verify", "--all", "--config", str(config)])  # run 2: the fleet's latest, red
    assert red.exit_code == 1, red.output
    walk = ["bisect", "toy:plain", "--node", "here", "--good", good, "--bad", "HEAD", "--config", str(config)]
    done = cli.invoke(main, walk)  # runs 3 (HEAD, bad) and 4 (the good commit, as expected)
    assert done.exit_code == 0, done.output
    for fmt in ("junit", "json"):
        exported = cli.invoke(main, ["report", "--format", fmt, "--config", str(config)])
        assert exported.exit_code == 1, (fmt, exported.output[:300])
        assert ('id="2"' if fmt == "junit" else '"id": 2,') in exported.output, exported.output[:300]
    rendered = cli.invoke(main, ["report", "--config", str(config)])
    assert rendered.exit_code == 0, rendered.output
    summary = summary_of(root / "reports" / "index.html")
    assert "Run 2: 0 of 1 cells as expected" in summary, summary


def test_a_bisections_green_run_is_not_rendered_as_the_sites_current_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`farm bisect` rendered the reviewers' site as its shown run: for --bad an older commit
    that is as expected ("nothing to bisect"), reports/index.html read "Run 3: 1 of 1 cells
    as expected" (trigger bisect, an old commit), over the fleet's latest run, which had
    failed at HEAD. The site stays the fleet's latest run; the cell's page is written beside it."""
    root, config, good = toy_repo(tmp_path, monkeypatch)
    source = root / "kernels" / "toy.cpp"
    source.write_text("// still fine\n" + source.read_text())
    git(root, "commit", "-q", "-am", "toy: a comment")
    fine = git(root, "rev-parse", "HEAD")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0  # run 1
    source.write_text("int main( {\n")
    git(root, "commit", "-q", "-am", "toy: break the build")
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1  # run 2, red
    walk = ["bisect", "toy:plain", "--node", "here", "--good", good, "--bad", fine, "--config", str(config)]
    done = cli.invoke(main, walk)  # run 3: the fine commit, as expected: nothing to bisect
    assert done.exit_code == 1, done.output
    summary = summary_of(root / "reports" / "index.html")
    assert "Run 2: 0 of 1 cells as expected" in summary, summary
    page = Path(re.search(r"^page: (.+)$", done.output, re.M).group(1))
    assert "result 3" in page.read_text()


def test_the_json_export_says_a_cell_that_never_ran_certifies_nothing(tmp_path: Path) -> None:
    """The JUnit export skips a compile-only cell (the kernel never ran: a node without a GPU)
    and a known failure, as certifying nothing; the JSON export marked both
    `"certifies_nothing": false`, its only word for a backed cell, and so a build-fail: a CI
    gate reading the JSON counted a kernel that never ran, one that failed as declared, or
    one that did not build, as certified."""
    config = toy_farm(tmp_path, broken="known-failure")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    exported = cli.invoke(main, ["report", "--format", "json", "--config", str(config)])
    assert exported.exit_code == 0, exported.output
    cells = {cell["variant"]: cell for cell in json.loads(exported.output)["cells"]}
    assert cells["plain"]["outcome"] == "compile-only" and cells["broken"]["outcome"] == "known-failure"
    assert cells["plain"]["certifies_nothing"] is True
    assert cells["broken"]["certifies_nothing"] is True
    toy_farm(tmp_path, broken="fails")
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1
    exported = cli.invoke(main, ["report", "--format", "json", "--config", str(config)])
    cells = {cell["variant"]: cell for cell in json.loads(exported.output)["cells"]}
    assert cells["broken"]["outcome"] == "build-fail" and cells["broken"]["certifies_nothing"] is True


def test_a_verify_run_cannot_take_the_trigger_of_a_bisections_runs(tmp_path: Path) -> None:
    """`farm verify --trigger bisect` was accepted: the run was stored as a bisection's, which
    the fleet's standing, the kernels' inputs and the latest run reported leave out. A red
    nightly under that trigger vanished: the matrix and `farm report --format junit` (exit 0)
    went on showing the night before's green."""
    config = toy_farm(tmp_path)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    toy_farm(tmp_path, broken="fails")
    done = cli.invoke(main, ["verify", "--all", "--trigger", "bisect", "--config", str(config)])
    assert done.exit_code == 2 and "farm bisect" in done.output, done.output
    exported = cli.invoke(main, ["report", "--format", "junit", "--config", str(config)])
    assert 'id="2"' not in exported.output


def test_a_report_of_another_database_does_not_replace_the_farms_site(tmp_path: Path) -> None:
    """`farm verify --database SCRATCH` leaves farm.yaml's site alone (a scratch run would
    replace the reviewers' site), but `farm report --database SCRATCH` with no --out rendered
    the scratch database's green run into reports/, over the farm's own red night."""
    config = toy_farm(tmp_path, broken="fails")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1  # the farm's night: red
    index = tmp_path / "reports" / "index.html"
    assert "Run 1: 1 of 2 cells as expected" in summary_of(index)
    toy_farm(tmp_path)  # the broken variant gone: a scratch run on another database is green
    scratch = f"sqlite:///{tmp_path}/scratch.db"
    assert cli.invoke(main, ["verify", "--all", "--database", scratch, "--config", str(config)]).exit_code == 0
    done = cli.invoke(main, ["report", "--database", scratch, "--config", str(config)])
    assert done.exit_code == 2, done.output
    assert "--out" in done.output
    assert "Run 1: 1 of 2 cells as expected" in summary_of(index)
    elsewhere = tmp_path / "scratch-site"
    done = cli.invoke(main, ["report", "--database", scratch, "--out", str(elsewhere), "--config", str(config)])
    assert done.exit_code == 0, done.output
    assert "Run 1: 1 of 1 cells as expected" in summary_of(elsewhere / "index.html")


def test_a_bisection_on_another_database_does_not_replace_the_farms_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`farm bisect --database SCRATCH` (or FARM_DATABASE) rendered its run into farm.yaml's
    reports/, the site of farm.yaml's own database, as `farm verify --database` no longer
    does: the farm's red night was replaced by the scratch database's site."""
    root, config, good = toy_repo(tmp_path, monkeypatch)
    (root / "kernels" / "toy.cpp").write_text("int main( {\n")
    git(root, "commit", "-q", "-am", "toy: break the build")
    cli = CliRunner()
    for _night in (1, 2):  # the farm's: red, run 2
        assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1
    index = root / "reports" / "index.html"
    before = index.read_text()
    assert "Run 2: 0 of 1 cells as expected" in summary_of(index)
    scratch = f"sqlite:///{tmp_path}/scratch.db"
    assert cli.invoke(main, ["verify", "--all", "--database", scratch, "--config", str(config)]).exit_code == 1
    walk = ["bisect", "toy:plain", "--node", "here", "--good", good, "--bad", "HEAD", "--config", str(config)]
    done = cli.invoke(main, [*walk, "--database", scratch])
    assert done.exit_code == 0, done.output
    assert index.read_text() == before
    assert "--out DIR" in done.output


def test_an_imported_run_leaves_no_green_index_of_the_run_before(tmp_path: Path) -> None:
    """`farm import JOURNAL` stored a newer run in farm.yaml's database (here red: a run whose
    database was lost, rebuilt from its journal) and rendered nothing: reports/index.html
    went on reading the run before's "1 of 1 cells as expected" as current, with no word of
    the imported run (as `verify --no-report` once did)."""
    config = toy_farm(tmp_path)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    index = tmp_path / "reports" / "index.html"
    assert "Run 1: 1 of 1 cells as expected" in summary_of(index)
    toy_farm(tmp_path, broken="fails")
    scratch = f"sqlite:///{tmp_path}/scratch.db"  # the run whose database is gone: its journal is left
    assert cli.invoke(main, ["verify", "--all", "--database", scratch, "--config", str(config)]).exit_code == 1
    journal = next((tmp_path / "scratch.db.journal").glob("*.jsonl"))
    done = cli.invoke(main, ["import", str(journal), "--config", str(config)])
    assert done.exit_code == 0 and "as run 2" in done.output, done.output
    text = index.read_text()
    assert "1 of 1 cells as expected" not in text
    assert "Run 2" in text
