"""Red-team round 48: a bisection's runs test old commits; the fleet's history, "what
changed", "unstable" and the kernel pages' grids must never take them for today's."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from toyfarm import toy_farm

from orchestrator.cli import main


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=farm test", "-c", "user.email=farm@test", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return done.stdout.strip()


def bisected_farm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """Run 1 green at the good commit; the build broken; run 2 red at HEAD; a `farm bisect`
    (runs 3: HEAD, bad; 4: the good commit, as expected). Returns (root, farm.yaml, good)."""
    root = tmp_path / "toy"
    config = toy_farm(root)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.chdir(root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "farm.yaml", "jobs", "kernels")
    git(root, "commit", "-q", "-m", "toy")
    good = git(root, "rev-parse", "HEAD")
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
