"""Red-team round 43: runs that did not finish, or were not rendered, hiding behind an
older green page or export."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from farm_cli import farm
from test_report import certify
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.config.farm import load_farm
from orchestrator.report import site
from orchestrator.report.model import collect
from orchestrator.store.database import Store
from orchestrator.store.lock import run_lock


def summary_of(index: Path) -> str:
    found = re.search(r'<p id="summary">(.*?)</p>', index.read_text(), re.DOTALL)
    return found.group(1) if found else ""


def test_a_run_with_no_report_leaves_no_green_index_of_the_night_before(tmp_path: Path) -> None:
    """`farm verify --no-report` left reports/index.html as the last rendered run's: a red
    (or killed) run 2 stood behind run 1's "1 of 1 cells as expected", with no word of it."""
    config = toy_farm(tmp_path)
    first = farm("verify", "--all", "--config", str(config))
    assert first.returncode == 0, first.stdout + first.stderr
    index = tmp_path / "reports" / "index.html"
    assert "Run 1: 1 of 1 cells as expected" in summary_of(index)
    toy_farm(tmp_path, broken="fails")  # a variant that does not build: run 2 is red
    second = farm("verify", "--all", "--no-report", "--config", str(config))
    assert second.returncode == 1, second.stdout + second.stderr
    text = index.read_text()
    assert "Run 1: 1 of 1 cells as expected" not in text
    assert "Run 2" in text


def test_a_report_rendered_while_a_new_run_starts_leaves_no_green_index_over_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`farm report` read the latest run (1, green), a nightly `farm verify` then stored run 2 and
    rendered its start, and the report wrote run 1's index over it: killed or not, run 2 stood
    behind run 1's "1 of 1 cells as expected" until its end's render."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config)).returncode == 0
    url = load_farm(config).database_url
    collect = site.collect

    def collect_then_a_run_starts(*args: object, **kwargs: object) -> object:
        model = collect(*args, **kwargs)
        if Store(url).latest_run().id == 1:  # the nightly's run is stored meanwhile
            Store(url).begin_run(
                planned=[("toy", "plain", "here", "")],
                token="nightly",
                trigger="cron",
                farm_version="0",
                host="h",
                config_file=str(config),
                selection="--all",
                cell_env="",
            )
        return model

    monkeypatch.setattr(site, "collect", collect_then_a_run_starts)
    done = CliRunner().invoke(main, ["report", "--config", str(config)])
    assert done.exit_code == 0, done.output
    text = (tmp_path / "reports" / "index.html").read_text()
    assert "Run 1: 1 of 1 cells as expected" not in text
    assert "Run 2" in text


def test_a_bisections_old_commit_is_not_the_kernels_inputs_now(tmp_path: Path) -> None:
    """A report from the database alone (no configuration, or a dependency not installed
    on the reporting host) took a kernel's inputs now from its latest identified result,
    a bisection's run of an old commit included: the ledger then held the old, passing
    inputs as the kernel's, VERIFIED, over a kernel whose edit fails on the fleet."""
    old, new = "a" * 64, "b" * 64
    store = Store(f"sqlite:///{tmp_path}/results.db")
    try:

        def a_run(trigger: str, identity: str, outcome: str) -> int:
            run_id = store.begin_run(trigger=trigger, farm_version="0", host="h", config_file="x", selection="--all")
            stdout = b"toy: PASS" if outcome == "pass" else b""
            certify(store, run_id, identity, real=True, outcome=outcome, stdout=stdout)
            store.finish_run(run_id, "finished", 0 if outcome == "pass" else 1)
            return run_id

        a_run("cron", old, "pass")  # the kernel as it was: certified
        a_run("cron", new, "fail")  # edited: fails on the fleet
        last = a_run("bisect", old, "pass")  # `farm bisect` tries the old commit again
        with store.reading():
            model = collect(store, last, None)
        entry = model.ledgers[0]
        assert entry.sha256 == new
        assert entry.capabilities["9.0"].state != "VERIFIED"
    finally:
        store.close()


def test_a_journal_is_not_imported_while_a_run_holds_the_database(tmp_path: Path) -> None:
    """`farm import` took no run lock: it wrote a finished run into results.db beside a live
    `farm verify`, as the newest run, over the live one (which, killed then, stood unfinished
    behind the imported green run: the site's and the exports' latest)."""
    config = toy_farm(tmp_path)
    loaded = load_farm(config)
    store = Store(loaded.database_url)
    try:
        with run_lock(loaded.database_url, loaded.root, 0):  # a nightly `farm verify` holds results.db
            live = store.begin_run(trigger="cron", farm_version="0", host="h", config_file="x", selection="--all")
            scratch = f"sqlite:///{tmp_path}/scratch.db"  # meanwhile, a run on a scratch database
            made = farm("verify", "--all", "--no-report", "--config", str(config), "--database", scratch)
            assert made.returncode == 0, made.stdout + made.stderr
            journal = next((tmp_path / "scratch.db.journal").glob("*.jsonl"))
            done = farm("import", str(journal), "--config", str(config))
        assert done.returncode == 6, done.stdout + done.stderr
        assert store.latest_run().id == live
    finally:
        store.close()
