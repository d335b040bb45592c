"""Red-team round 169: the node's file system, as a night run meets it.

Broke (before -> after):

1. farm.yaml's `workdir` holding a newline (a `workdir: |` block adds one at its end; a paste can
   put one inside): loaded without a word. The node's commands split at it: the python runners made
   a folder at its first line, outside the workdir the operator named, and the cell and shell
   runners stored every cell infra-error "eval: cannot create .../worknew/incoming/...: Directory
   nonexistent", naming a folder nobody wrote. Now refused at load naming farm.yaml,
   `nodes.NAME.workdir` and the character (exit 3, as every key's error); a tab or another control
   character too.
2. The node's work folder remounted noexec mid-run (an admin's hardening of /scratch, a remount
   by policy): the next cell was infra-error "its run could not be started on the node: the program
   of a command running the kernel (a launcher, or the binary) is not there, or not executable",
   naming neither the folder nor why. The look after the failed run now also makes a program there
   and runs it, and the cell's reason names the folder and that it no longer runs programs.

Held (kept as guards, or checked by hand): a workdir with spaces, quotes, `$(...)`, a glob, a
backslash, a leading dash or non-ASCII runs its cells on all three runners; the work folder out of
inodes mid-run (another tenant's files) is infra-error saying so (round 164's look); remounted
read-only mid-run (rounds 94, 116); a workdir symlink swapped mid-run reads as the folder removed
(round 116); the login's TMPDIR missing, a file, or read-only, and the login's HOME missing or
read-only with an absolute workdir, all run their cells (the farm gives each build and run a
TMPDIR of its own); the node's clock is never read (ages are the file system's own mtimes,
staging.py), so a `date` that lies changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import CARDS, SshNode, running_node, standin_job, standin_variant, write_farm
from test_config import load_error, make_farm
from test_faults import results, run_farm
from test_redteam116 import NAME, remounted_midrun

from orchestrator.errors import EXIT_INFRA

MIN75 = {"min": "7.5"}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    yield from running_node(NAME, tmp_path / "node", CARDS["t4"])


@pytest.mark.parametrize(
    ("written", "found"),
    [('"/tmp/farm\\nwork"', "'\\n'"), ("|\n      /tmp/farm", "'\\n'"), ('"/tmp/farm\\twork"', "'\\t'")],
)
@pytest.mark.parametrize("transport", ["ssh", "local"])
def test_a_workdir_with_a_newline_is_refused_at_load(tmp_path: Path, written: str, found: str, transport: str) -> None:
    """Before: loaded; on the node a folder made at the newline, outside the workdir, or every cell
    infra-error "cannot create .../worknew/incoming/...". Figure: a ConfigError on farm.yaml's
    `nodes.n.workdir` naming the character."""
    host = "    host: gpu1.example.org\n" if transport == "ssh" else ""
    farm = f"database: sqlite:///results.db\nnodes:\n  n:\n    transport: {transport}\n{host}    workdir: {written}\n"
    err = load_error(make_farm(tmp_path, farm=farm))
    assert err.file == str(tmp_path / "farm.yaml")
    assert err.key == "nodes.n.workdir", err
    assert "control character" in err.expected and found in err.expected, err.expected


def test_a_workdir_with_spaces_quotes_and_non_ascii_runs_its_cells(node: SshNode, tmp_path: Path) -> None:
    """Held: a workdir of spaces, quotes, `$(...)` and non-ASCII is one folder on the node, its cells
    judged as anywhere. Figure: pass and fail as the kernels say, the folder there by its own name."""
    workdir = tmp_path / "work dir 'q\" $(touch pwned) ünï"
    variants = {"p": standin_variant("PASS", MIN75, "MIN_CC=75"), "f": standin_variant("FAILNUM", MIN75, "MIN_CC=75")}
    config = write_farm(tmp_path, {NAME: node.farm_entry(workdir)}, [standin_job("k", variants)])
    summary, _ = run_farm(config)
    rows = {variant: row["outcome"] for (_, variant), row in results(tmp_path / "results.db", summary.run_id).items()}
    assert rows == {"p": "pass", "f": "fail"}
    assert (workdir / "cells").is_dir() and not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_a_work_folder_remounted_noexec_mid_run_is_said_so(node: SshNode, tmp_path: Path, runner: str) -> None:
    """The work folder bind-mounted over itself and remounted noexec while the first cell's kernel
    runs. Before: the next cell infra-error "the program ... is not there, or not executable", naming
    no folder. Figure: 1 pass, 1 infra-error naming the folder and that it no longer runs programs;
    exit 4."""
    code, rows, _ = remounted_midrun(node, tmp_path, "noexec")
    assert rows["slow"]["outcome"] == "pass", rows["slow"]["reason"]
    after = rows["after"]
    assert after["outcome"] == "infra-error", after["reason"]
    assert f"work folder {tmp_path / 'work'} could no longer run programs" in after["reason"], after["reason"]
    assert "noexec" in after["reason"], after["reason"]
    assert code == EXIT_INFRA


@pytest.mark.parametrize("key", ["nvcc", "cuobjdump", "key_file", "known_hosts", "dependencies.cutlass"])
def test_a_nodes_other_paths_with_a_newline_are_refused_at_load(tmp_path: Path, key: str) -> None:
    """Round 169's note: only `workdir` was checked. Figure: each path key of a node refused alike."""
    field, _, name = key.partition(".")
    value = f'"/opt/x\\n{field}"'
    entry = f"    {field}:\n      {name}: {value}\n" if name else f"    {field}: {value}\n"
    farm = f"database: sqlite:///results.db\nnodes:\n  n:\n    host: gpu1.example.org\n{entry}"
    err = load_error(make_farm(tmp_path, farm=farm))
    assert err.key.startswith(f"nodes.n.{field}"), err
    assert "control character" in err.expected, err.expected
