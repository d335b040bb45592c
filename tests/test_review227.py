"""Review round 227: what landed in session 43 (ssh_liveness.py's Hearing and Transfer, slurm_query.py's
stuck watch, cli/once.py and config/followable.py), each finding with the test that showed it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.config.followable import unfollowable
from orchestrator.transport.slurm_query import deadline_setting, record_query, stuck_watch

FAKE_SQUEUE = """#!/bin/sh
printf '%s\\n' "$*" >> "$FARM_TEST_LOG"
case "$*" in *'%T|%r'*) echo 'PENDING|Priority';; *) echo '7|COMPLETED|n1|None|1G|1|2|0:01';; esac
"""


def test_the_stuck_watch_and_the_record_ask_slurmctld_for_the_users_jobs_not_the_clusters(tmp_path: Path) -> None:
    """Before: the stuck watch asked `squeue -t all --name=JOB` every 5 s while a job pended (its
    pending_limit: 300 s by default, 60 asks a cell) and the record's query once more; squeue filters
    by name on the client, so each ask had slurmctld pack every job of the cluster (tens of thousands
    on a big one) under its job read lock, per cell, per farm worker. Figure: each squeue is given the
    login's uid (`-u`), so slurmctld sends that user's jobs alone (squeue then asks
    slurm_load_job_user); the watch and the record still read the job as before."""
    (tmp_path / "squeue").write_text(FAKE_SQUEUE)
    (tmp_path / "squeue").chmod(0o755)
    log = tmp_path / "asked"
    script = (
        deadline_setting(20)
        + stuck_watch("farm-n-1 odd'name", "abc", 3, 0.2)
        + "sleep 1; kill $farm_w; rc=0; "
        + record_query("farm-n-1 odd'name", "abc", 4)
    )
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "FARM_TEST_LOG": str(log)}
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=30)
    assert "@@slurm-job-abc 7|COMPLETED" in done.stdout, (done.stdout, done.stderr)
    asked = log.read_text().splitlines()
    assert len(asked) >= 2, asked  # the watch's polls and the record's
    uid = str(os.getuid())
    for line in asked:
        assert f"-u {uid} " in f"{line} " and "--name=farm-n-1 odd'name" in line, asked


def test_a_symbolic_link_loop_is_told_where_resolve_no_longer_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: red-team 225's check asked pathlib (`resolve().exists()`), taking Python 3.11's
    RuntimeError for a loop; on Python 3.13 (pyproject: >=3.11) resolve() returns the path as it is
    and exists() reads ELOOP as False, so a loop under `jobs:` or `database:` passed as a path not yet
    there. Figure: with resolve() as 3.13 has it, the loop is still told as one (the kernel's ELOOP)."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    monkeypatch.setattr(Path, "resolve", lambda self, strict=False: Path(os.path.abspath(self)))  # 3.13's
    assert unfollowable(tmp_path / "a" / "jobs") == "a symbolic link loop on its way"
    assert unfollowable(tmp_path / ("n" * 300)) == "a name longer than the file system holds"
    assert unfollowable(tmp_path / "absent" / "jobs") is None
