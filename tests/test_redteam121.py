"""Red-team round 121: a local node's work folder among the farm's own folders.

Broke (before -> after):

1. A `transport: local` node whose `workdir` was the reports folder (or inside it, the journal
   folder, jobs/ or kernels/), or whose own `cells/` held farm.yaml's `reports`, was run without a
   word, exit 0: the node's builds/ (the kernels' binaries), bundles/ (the course's sources),
   incoming/ and each running cell's raw stdout and stderr, the secrets in them not yet masked,
   went into the folder the site is published from, among the journals `farm import` reads, or
   among the course's sources. Now every command refuses such a farm.yaml at load, exit 3, naming
   farm.yaml, `nodes.NODE.workdir`, both folders and what is expected; nothing is written (no
   results.db, no reports/).

Held (kept as guards here): a local node's workdir beside the farm's folders (the toy farm's
root/node, the usual layout) and one that holds the whole project (the project root's parent)
still run; `reports: .` and a `reports` that is a file were already refused (round 82's checks).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from farm_cli import farm
from toyfarm import toy_farm

from orchestrator.errors import EXIT_CONFIG, EXIT_OK


def _workdir(config: Path, workdir: str, reports: str = "reports") -> None:
    text = config.read_text()
    lines = [
        f"    workdir: {workdir}" if line.startswith("    workdir:") else line
        for line in text.splitlines()
        if not line.startswith("reports:")
    ]
    config.write_text(f"reports: {reports}\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("workdir", "reports", "key", "says"),
    [
        ("{root}/reports", "reports", "reports", "which is the farm's `reports` folder"),
        ("{root}/reports/node", "reports", "reports", "the farm's `reports` folder"),
        ("{root}/results.db.journal", "reports", "journal", "which is the farm's `journal` folder"),
        ("{root}/kernels/node", "reports", "kernels", "the farm's `kernels` folder"),
        ("{root}/jobs", "reports", "jobs", "which is the farm's `jobs` folder"),
        ("{root}/node", "node/cells/site", "reports", "whose own subfolders hold the farm's `reports` folder"),
    ],
)
def test_a_local_nodes_workdir_among_the_farms_folders_is_refused_and_nothing_written(
    tmp_path: Path, workdir: str, reports: str, key: str, says: str
) -> None:
    config = toy_farm(tmp_path)
    _workdir(config, workdir.format(root=tmp_path), reports)
    done = farm("verify", "--all", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    error = done.stderr.strip()
    assert error.startswith(f"Error: {config}: nodes.here.workdir: found "), error
    assert says in error and "expected a folder of the node's own" in error, error
    assert key in error
    assert not (tmp_path / "results.db").exists()
    assert not (tmp_path / "reports").exists() and not (tmp_path / "node").exists()
    # the read-only commands refuse it alike: the same farm.yaml, the same words
    jobs = farm("jobs", "--config", str(config), cwd=tmp_path)
    assert jobs.returncode == EXIT_CONFIG and "nodes.here.workdir" in jobs.stderr, jobs.stderr


@pytest.mark.parametrize("above", [False, True])
def test_a_local_nodes_workdir_beside_or_above_the_farms_folders_still_runs(tmp_path: Path, above: bool) -> None:
    root = tmp_path / "farm"
    config = toy_farm(root)
    _workdir(config, str(tmp_path if above else root / "node"))  # above: the folder that holds the project
    done = farm("verify", "--all", "--config", str(config), cwd=root)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert (root / "reports" / "index.html").is_file()
    assert not (root / "reports" / "builds").exists() and not (root / "reports" / "bundles").exists()
