"""Red-team round 43: runs that did not finish, or were not rendered, hiding behind an
older green page or export."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.config.farm import load_farm
from orchestrator.report import site
from orchestrator.store.database import Store


def farm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )


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
