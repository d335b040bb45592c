"""Red-team round 156: inputs that change during a run, as a nightly run meets them while a kernel
author keeps editing. The nodes check every staged and built byte against the digest the farm
hashed at load; the farm's own later reads of the same files did not:

- the report rendered at a run's end held the kernel's inputs "now" as the run's start had hashed
  them, and its jobs as the start had read them: a source or job file edited during the run left
  the pass green and current, its certificate VERIFIED, over a file the run never built;
- the run stored a source's bytes, read again at its start, under the sha256 hashed at the load: an
  edit between the two kept other bytes in the database under the certified identity's file;
- a header-derived job took its Build: lines from one read of the source and its identity from
  another: an edit between them certified bytes under a build and contract their header does not say.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from nodes import CARDS, nvidia_smi_script, smi_on_path
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.config import header
from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError
from orchestrator.run import bundle, cell_work, node_setup, scheduler


def matrix_cell(index: Path, variant: str) -> str:
    found = re.search(rf'<td class="[^"]*"[^>]*data-cell="toy:{variant}".*?</td>', index.read_text(), re.S)
    assert found is not None, index.read_text()
    return found.group()


def run_editing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Callable[[Path], None]) -> Path:
    """The toy farm verified on a stand-in T4, `edit(farm folder)` done once its cell is stored (the
    author saving while the run goes on): the farm folder."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    root = tmp_path / "farm"
    config = toy_farm(root)
    finish = cell_work.CellWork._finish

    def finish_then_edit(self, *args, **kwargs) -> None:
        finish(self, *args, **kwargs)
        edit(root)

    monkeypatch.setattr(cell_work.CellWork, "_finish", finish_then_edit)
    done = CliRunner().invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 0, done.output
    return root


def test_a_source_edited_during_the_run_is_stale_in_the_report_the_run_renders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def edit(root: Path) -> None:
        source = root / "kernels" / "toy.cpp"
        source.write_text(source.read_text() + "// edited while the run ran\n")

    root = run_editing(tmp_path, monkeypatch, edit)
    cell = matrix_cell(root / "reports" / "index.html", "plain")
    assert "stale-cell" in cell and "inputs changed since" in cell, cell


def test_a_job_edited_during_the_run_is_judged_as_it_is_now_in_the_report_the_run_renders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def edit(root: Path) -> None:  # the T4's pass must now be refused by the kernel's gate
        job = root / "jobs" / "toy.yaml"
        job.write_text(job.read_text().replace("min: '7.5'", "min: '8.0'"))

    root = run_editing(tmp_path, monkeypatch, edit)
    cell = matrix_cell(root / "reports" / "index.html", "plain")
    assert "job changed since" in cell and "must now be refused" in cell, cell


def test_a_farm_file_that_no_longer_loads_at_the_runs_end_leaves_no_report_over_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def edit(root: Path) -> None:
        (root / "jobs" / "toy.yaml").write_text("kernel: toy\nsources: [\n")

    root = run_editing(tmp_path, monkeypatch, edit)
    index = (root / "reports" / "index.html").read_text()
    assert 'data-cell="toy:plain"' not in index, index
    assert "changed during the run" in index, index


def test_a_source_edited_before_the_run_stores_it_keeps_no_other_bytes_under_its_sha(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    root = tmp_path / "farm"
    config = toy_farm(root)
    begin = scheduler.FarmRun._begin

    def edit_then_begin(self, *args, **kwargs) -> int:
        source = root / "kernels" / "toy.cpp"
        source.write_text(source.read_text() + "// VERIFIED on CC 7.5 (2020-01-01): saved after the load\n")
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(scheduler.FarmRun, "_begin", edit_then_begin)
    CliRunner().invoke(main, ["verify", "--all", "--config", str(config)])
    with sqlite3.connect(root / "results.db") as db:
        stored = db.execute("SELECT sha256, content FROM source_files").fetchall()
    for sha, content in stored:
        assert hashlib.sha256(content).hexdigest() == sha, content


def test_a_kernel_edited_between_its_header_read_and_its_hash_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kernels").mkdir()
    source = tmp_path / "kernels" / "k.cu"
    source.write_text("// Build: nvcc -arch=sm_75 -o k k.cu\nint main() { return 0; }\n")
    (tmp_path / "farm.yaml").write_text("nodes:\n  local:\n    transport: local\n")
    derive = header.derive_job

    def derive_then_edit(path: Path, *args, **kwargs):
        derived = derive(path, *args, **kwargs)
        path.write_text("// Build: nvcc -arch=sm_90a -o k k.cu\nint main() { return 1; }\n")
        return derived

    monkeypatch.setattr(header, "derive_job", derive_then_edit)
    with pytest.raises(ConfigError) as info:
        load_farm(tmp_path / "farm.yaml")
    assert "changed while the farm read it" in str(info.value), info.value


def test_a_source_saved_after_the_load_is_said_to_have_changed_here_not_on_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel saved between the run's load and its staging: the node refused the bytes (their
    digest is not the load's), and the cell said "placing sources of toy on NODE failed: written
    digest ..., expected ...", the node's fault by its words, retried for nothing (round 156's
    leftover). The farm now holds its own read to the load's hash and names the file."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    root = tmp_path / "farm"
    config = toy_farm(root)
    setup = node_setup.NodeSetup.setup

    def edit_then_set_up(*args, **kwargs):
        source = root / "kernels" / "toy.cpp"
        source.write_text(source.read_text() + "// saved after the load\n")
        return setup(*args, **kwargs)

    monkeypatch.setattr(node_setup.NodeSetup, "setup", edit_then_set_up)
    done = CliRunner().invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 4, done.output
    with sqlite3.connect(root / "results.db") as db:
        rows = db.execute("SELECT outcome, reason FROM results").fetchall()
    assert rows and all(outcome == "infra-error" for outcome, _ in rows), rows
    assert all("toy.cpp changed on the farm's own machine since the run read it" in why for _, why in rows), rows
    with sqlite3.connect(root / "results.db") as db:
        attempts = db.execute("SELECT count(*) FROM attempts WHERE kernel IS NULL").fetchone()[0]
    assert attempts == 1  # the same file is met again: not retried


def test_an_archive_of_bytes_other_than_its_digests_is_never_kept(tmp_path: Path) -> None:
    """A dependency changed while its archive was packed (a pip upgrade of CUTLASS mid-run): the
    archive was kept under the old digest, and every later node that took it failed to place it."""
    folder = tmp_path / "dep"
    folder.mkdir()
    (folder / "a.h").write_text("int a;\n")
    (folder / "b.h").write_text("int b;\n")
    dep = bundle.Bundle.of_folder("dependency dep", folder)
    (folder / "b.h").write_text("int b; // upgraded\n")
    cache = tmp_path / "cache"
    with pytest.raises(bundle.InputsChanged, match=r"b\.h changed on the farm's own machine"):
        dep.archive(cache)
    assert list(cache.iterdir()) == []  # neither the archive nor its part
    (folder / "b.h").write_text("int b;\n")
    with tarfile.open(dep.archive(cache)) as packed:
        assert packed.getnames() == ["a.h", "b.h"]
