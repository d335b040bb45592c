"""Red-team round 79: the commands other than `farm verify`, as an operator and a reviewer use
them. `farm nodes` printed a green row and exited 0 for a node `farm verify` refuses as
infra-error (an nvidia-smi that fails: "no GPU ... exit 0"; an nvcc that is not there: "none",
exit 0), so the night operator's check of the fleet disagreed with the night's run. `farm
import` of several journals, one of them unreadable or refused, stored the ones before it and
exited 5 without a word on reports/index.html, whose green run before went on standing as
current over the imported red one; and a journal that cannot be read upgraded an older
database's schema before it was refused. `farm jobs` ("reads the configuration only") and `farm
nodes` refused to start while the database's folder was missing (an unmounted disk). And a
database URL naming the farm's own files: `verify --database sqlite:///jobs/toy.yaml` left its
run lock's files in jobs/, and every later command of the farm refused them as job files; one
naming a kernel source was said as the job's error, a folder as "9 names (hard links)"."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

from click.testing import CliRunner
from farm_cli import farm
from test_redteam46 import summary_of
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.store.database import Store

DATA = Path(__file__).resolve().parent / "data"
# what nvidia-smi says where the driver and its library disagree (after a driver upgrade, before a reboot)
MISMATCH = '#!/bin/sh\necho "Failed to initialize NVML: Driver/library version mismatch"\nexit 18\n'


# ------------------------------------------------------------ 1. farm nodes agrees with farm verify


def test_farm_nodes_is_not_green_for_a_node_verify_refuses(tmp_path: Path) -> None:
    """A node whose nvidia-smi fails (the driver cannot be reached): `farm verify` makes every
    cell infra-error, exit 4; `farm nodes` printed "here  yes  no GPU ... 13.0.88  no" and
    exited 0, a compile-only node as far as the operator could tell."""
    config = toy_farm(tmp_path)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(MISMATCH)
    smi.chmod(0o755)
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}"}
    run = farm("verify", "--all", "--config", str(config), extra_env=env)
    assert run.returncode == 4, run.stdout + run.stderr
    probed = farm("nodes", "--config", str(config), extra_env=env)
    assert probed.returncode == 4, probed.stdout + probed.stderr
    row = next(line for line in probed.stdout.splitlines() if line.startswith("here "))
    assert "unusable" in row and "nvidia-smi failed" in row and "version mismatch" in row, row
    assert "no GPU" not in row, row


def test_farm_nodes_is_not_green_for_a_node_without_its_nvcc(tmp_path: Path) -> None:
    """A node whose `nvcc:` is not there: every cell of it is infra-error in `farm verify`;
    `farm nodes` said "nvcc none" in a row of its own and exited 0."""
    config = toy_farm(tmp_path)
    config.write_text(config.read_text() + "    nvcc: /nonexistent/bin/nvcc\n")
    assert farm("verify", "--all", "--config", str(config)).returncode == 4
    probed = farm("nodes", "--config", str(config))
    assert probed.returncode == 4, probed.stdout + probed.stderr
    row = next(line for line in probed.stdout.splitlines() if line.startswith("here "))
    assert "unusable" in row and "no working nvcc at '/nonexistent/bin/nvcc'" in row, row


# ------------------------------------------------------------ 2. farm import: whole or nothing


def _journals(tmp_path: Path, runs: int) -> list[Path]:
    """The journals of `runs` red runs of the toy farm into a database since lost (scratch.db),
    oldest first, after a green run 1 stored and rendered in farm.yaml's own."""
    config = toy_farm(tmp_path)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    toy_farm(tmp_path, broken="fails")
    scratch = f"sqlite:///{tmp_path}/scratch.db"
    for _ in range(runs):
        assert cli.invoke(main, ["verify", "--all", "--database", scratch, "--config", str(config)]).exit_code == 1
    return sorted((tmp_path / "scratch.db.journal").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)


def test_an_import_refused_halfway_imports_nothing(tmp_path: Path) -> None:
    """Two journals, the newer one damaged in its middle: run 2 (red) was stored, then the
    command exited 5, and reports/index.html went on reading run 1's "1 of 1 cells as
    expected" as current while the database's newest run was red. Every journal is read
    before any is imported now: a damaged one is refused with nothing stored."""
    older, newer = _journals(tmp_path, 2)
    lines = newer.read_text().splitlines(keepends=True)
    newer.write_text("".join([lines[0], "{damaged\n", *lines[1:]]))
    index = tmp_path / "reports" / "index.html"
    before = index.read_text()
    done = CliRunner().invoke(main, ["import", str(older), str(newer), "--config", str(tmp_path / "farm.yaml")])
    assert done.exit_code == 5, done.output
    assert f"{newer}: line 2 is not a journal record" in done.output, done.output
    assert "imported" not in done.output, done.output
    store = Store(f"sqlite:///{tmp_path / 'results.db'}", create=False)
    assert [run.id for run in store.runs()] == [1]
    store.close()
    assert index.read_text() == before


def test_an_import_refused_after_a_run_was_stored_says_so_on_the_index(tmp_path: Path) -> None:
    """A journal whose run is already there, after another: the first is imported as run 2 (red),
    the second is refused (its run is run 1) and the command exits 5. The index still read run 1
    green as current; it says run 2 has no report now, as after an import that went through.
    (One journal named twice is refused before anything is stored: test_redteam83.)"""
    (journal,) = _journals(tmp_path, 1)
    (own,) = (tmp_path / "results.db.journal").glob("*.jsonl")  # run 1's, said to start after run 2's
    lines = own.read_text().splitlines(keepends=True)
    first = {**json.loads(lines[0]), "started_at": {"$time": "2999-01-01T00:00:00+00:00"}}
    later = tmp_path / "later.jsonl"
    later.write_text(json.dumps(first) + "\n" + "".join(lines[1:]))
    index = tmp_path / "reports" / "index.html"
    assert "Run 1: 1 of 1 cells as expected" in summary_of(index)
    done = CliRunner().invoke(main, ["import", str(journal), str(later), "--config", str(tmp_path / "farm.yaml")])
    assert done.exit_code == 5 and "as run 2" in done.output and "already in" in done.output, done.output
    assert "1 of 1 cells as expected" not in summary_of(index)
    assert "Run 2: no report" in summary_of(index), summary_of(index)


def test_an_unreadable_journal_leaves_an_older_database_as_it_was(tmp_path: Path) -> None:
    """`farm import` of a file that is no journal, into a database of an older farm: refused
    (exit 5), but only after the database was upgraded to this farm's schema, which the farm
    that still writes it can no longer open."""
    old = tmp_path / "old.db"
    old.write_bytes((DATA / "first-schema.db").read_bytes())
    config = toy_farm(tmp_path / "farm")
    bogus = tmp_path / "notes.jsonl"
    bogus.write_text("these are not a journal's records\n{}\n")
    done = farm("import", str(bogus), "--config", str(config), "--database", f"sqlite:///{old}")
    assert done.returncode == 5, done.stdout + done.stderr
    assert f"{bogus}: line 1 is not a journal record" in done.stderr, done.stderr
    assert hashlib.sha256(old.read_bytes()).digest() == hashlib.sha256((DATA / "first-schema.db").read_bytes()).digest()
    with sqlite3.connect(old) as db:
        assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'alembic_version'").fetchall()


# ------------------------------------------------------------ 3. commands that use no database


def test_jobs_and_nodes_start_without_the_database_folder(tmp_path: Path) -> None:
    """FARM_DATABASE on a disk that is not mounted: `farm jobs` (it "reads the configuration
    only") and `farm nodes` (it probes the nodes) were refused, exit 3, for a database
    neither of them opens; the operator could not check the fleet while the disk was away."""
    config = toy_farm(tmp_path)
    env = {"FARM_DATABASE": f"sqlite:///{tmp_path}/unmounted/results.db"}
    jobs = farm("jobs", "--config", str(config), extra_env=env)
    assert jobs.returncode == 0 and "kernel: toy" in jobs.stdout, jobs.stdout + jobs.stderr
    nodes = farm("nodes", "--config", str(config), extra_env=env)
    assert nodes.returncode == 0 and "no GPU" in nodes.stdout, nodes.stdout + nodes.stderr
    assert not (tmp_path / "unmounted").exists()


# ------------------------------------------------------------ 4. a database URL that names the farm's own files


def test_a_database_in_the_jobs_folder_is_refused_before_its_lock_is_taken(tmp_path: Path) -> None:
    """`farm verify --database sqlite:///jobs/toy.yaml` (a slip of the shell's completion): the
    run lock was taken beside it, jobs/toy.yaml.lock and .lock.holder, before the open said "file
    is not a database"; from then on every command, `farm jobs` too, was refused: "toy.yaml.lock.holder:
    found a job file's name the farm does not read". It is refused at once, naming the URL's origin."""
    config = toy_farm(tmp_path)
    job = tmp_path / "jobs" / "toy.yaml"
    for args, env, where in (
        (["verify", "--all", "--database", f"sqlite:///{job}"], {}, "--database"),
        (["import", str(config), "--database", f"sqlite:///{job}"], {}, "--database"),
        (["verify", "--all"], {"FARM_DATABASE": f"sqlite:///{tmp_path}/jobs/new.yaml"}, "FARM_DATABASE"),
    ):
        done = farm(*args, "--config", str(config), extra_env=env)
        assert done.returncode == 3, done.stdout + done.stderr
        assert done.stderr.startswith(f"Error: {where}: found sqlite:///{tmp_path}/jobs/"), done.stderr
        assert "in the farm's `jobs` folder" in done.stderr, done.stderr
        assert sorted(p.name for p in job.parent.iterdir()) == ["toy.yaml"]
    assert farm("jobs", "--config", str(config)).returncode == 0


def test_a_database_that_is_a_kernel_source_or_a_folder_is_said_as_the_urls_error(tmp_path: Path) -> None:
    """`--database sqlite:///kernels/toy.cpp` was said as the job's error ("jobs/toy.yaml:
    sources[0]: found 'kernels/toy.cpp', which is the farm's results database"), and a folder as
    "has 9 names (hard links)": neither named what was wrong, the URL."""
    config = toy_farm(tmp_path)
    source = tmp_path / "kernels" / "toy.cpp"
    done = farm("show", "1", "--config", str(config), "--database", f"sqlite:///{source}")
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith(f"Error: --database: found sqlite:///{source}, whose file is {source}"), done.stderr
    folder = tmp_path / "node"
    folder.mkdir()
    done = farm("verify", "--all", "--config", str(config), "--database", f"sqlite:///{folder}")
    assert done.returncode == 3, done.stderr
    assert f"which names the folder {folder}" in done.stderr and "hard links" not in done.stderr, done.stderr
    assert not list(tmp_path.glob("node.lock*"))
