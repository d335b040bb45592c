"""Red-team round 167: the night operator's environment (cron's streams, umask and log).

Broke (before/after):
- `--log` naming a FIFO that no process reads (a log shipper's pipe whose reader died): `verify`
  took the run lock, then blocked in the log's open for good; SIGTERM (cron's, systemd's, a
  `timeout`) was noted and the open resumed, so only SIGKILL ended it, and every later night
  met the lock it held (exit 6). It is exit 3 naming the file and what it waits for now.
- stdout closed by whatever started the farm (`farm verify --all >&-`): sys.stdout was None and
  `verify` died on it, exit 70 "a bug in farm", no run; the next file opened took descriptor 1.
  Descriptors 0-2 that are closed are /dev/null now, and a closed stdout is a stream that cannot
  be written: `verify` says so once on stderr and runs; an export to it is exit 3.
- umask 0777 (a misset crontab or unit): the `local` node's build came out mode 000 and a
  passing kernel was judged `fail` ("the kernel's copy was gone or not executable ... removed or
  changed by the run itself"), as SSH logins' 0777 once did; the farm keeps its owner's bits.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import query
from toyfarm import toy_on_t4


@pytest.fixture
def toy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    return toy_on_t4(tmp_path)


def test_a_log_that_is_a_fifo_nobody_reads_is_refused_not_a_hang_holding_the_lock(
    toy: tuple[Path, dict[str, str]],
) -> None:
    """Before: the open blocked for good with the run lock held (SIGTERM did not end it; here the
    test's timeout killed it). Figure: a log shipper's FIFO whose reader died."""
    config, env = toy
    fifo = config.parent / "verify.log"
    os.mkfifo(fifo)
    try:
        done = farm("verify", "--all", "--log", str(fifo), cwd=config.parent, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("farm verify hung opening a --log FIFO that no process reads")
    assert done.returncode == 3, done.stdout + done.stderr
    assert str(fifo) in done.stderr and "no process reads" in done.stderr, done.stderr
    assert "internal error" not in done.stderr, done.stderr
    # the lock was let go: the next night runs
    again = farm("verify", "--all", cwd=config.parent, env=env, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_closed_stdout_stops_what_is_printed_never_the_run(toy: tuple[Path, dict[str, str]]) -> None:
    """Before: exit 70, "internal error (AttributeError: 'NoneType' object has no attribute
    'isatty'); this is a bug in farm", and no run. Figure: `farm verify --all >&-` in a crontab."""
    config, env = toy
    closed = ["sh", "-c", 'exec "$@" >&-', "sh"]
    done = farm("verify", "--all", cwd=config.parent, env=env, wrapper=closed)
    assert done.returncode == 0, done.stderr
    assert "internal error" not in done.stderr, done.stderr
    assert "cannot write <stdout>" in done.stderr, done.stderr
    runs = query(config.parent / "results.db", "SELECT status, exit_code FROM runs")
    assert [(r["status"], r["exit_code"]) for r in runs] == [("finished", 0)]
    # an export to a closed stdout wrote nothing: it is no green step
    export = farm("report", "--format", "json", cwd=config.parent, env=env, wrapper=closed)
    assert export.returncode == 3, export.stderr
    assert "stdout" in export.stderr and "cannot be written" in export.stderr, export.stderr


def test_closed_stdin_and_stderr_leave_the_run_its_verdict(toy: tuple[Path, dict[str, str]]) -> None:
    """Figure: `farm verify --all <&- 2>&-`; the run stores and returns its own code, its lock
    file and journal untouched by anyone's stderr."""
    config, env = toy
    done = farm("verify", "--all", cwd=config.parent, env=env, wrapper=["sh", "-c", 'exec "$@" <&- 2>&-', "sh"])
    assert done.returncode == 0, done.stdout
    assert "exit 0 (every cell as expected)" in done.stdout
    assert (config.parent / "results.db.lock").read_bytes() == b""


def test_a_umask_that_masks_the_owners_bits_fails_no_kernel(toy: tuple[Path, dict[str, str]]) -> None:
    """Before: toy:plain `fail`, "the kernel's copy was gone or not executable when the run called
    it: ... removed or changed by the run itself", exit 1. Figure: `umask 0777` in a cron unit."""
    config, env = toy
    done = farm("verify", "--all", cwd=config.parent, env=env, umask=0o777)
    rows = query(config.parent / "results.db", "SELECT outcome, reason FROM results")
    assert [r["outcome"] for r in rows] == ["pass"], [dict(r) for r in rows]
    assert done.returncode == 0, done.stdout + done.stderr
    # the group's and others' bits stay masked: the database is the owner's alone
    assert (config.parent / "results.db").stat().st_mode & 0o777 == 0o600
