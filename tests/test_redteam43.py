"""Red-team round 43: runs that did not finish, or were not rendered, hiding behind an
older green page or export."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from toyfarm import toy_farm


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
