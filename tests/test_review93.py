"""Review round 93, the night operator's: what cron's environment and cron's signals do, failing first.

1. A SIGTERM (a killed cron job, `systemctl stop`), SIGHUP or Ctrl-C while `farm verify --wait 600`
   waited behind an overlapping run's lock (or opened the database, or killed what an aborted run
   left on the nodes: all before the run's own signal handling) killed the farm outright: no word
   on stderr, none in `--log`, whose last line stayed the night before's green verdict, and a
   signal's status (143); Ctrl-C ended in click's "Aborted!" and exit 1, a kernel's failure.
2. The local node under a HOME that is no folder (a system user's /nonexistent, as cron or
   systemd runs the farm for it): every command failed to start in it, the node's cells "internal
   error in the farm", exit 70, a traceback on stderr; with the default relative `workdir` it
   could only have been made under / (sshd's own cwd for such a login).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from farm_cli import farm, farm_argv
from filelock import FileLock
from test_faults import cli_env, farm_cli
from toyfarm import toy_farm

from orchestrator.errors import EXIT_CONFIG, EXIT_INFRA, EXIT_OK
from orchestrator.store.lock import lock_path


def _runs(database: Path) -> list[tuple]:
    with sqlite3.connect(database) as db:
        return db.execute("SELECT id, status, exit_code FROM runs").fetchall()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_while_waiting_for_the_run_lock_says_so_everywhere(tmp_path: Path, signum: int) -> None:
    config = toy_farm(tmp_path)
    # a disabled node: verify names it before it waits for the lock, which tells the test it is there
    config.write_text(config.read_text() + "  off:\n    transport: local\n    enabled: false\n")
    log = str(tmp_path / "verify.log")
    first = farm_cli(tmp_path, "verify", "--all", "--config", str(config), "--log", log)
    assert first.returncode == EXIT_OK, first.stdout + first.stderr
    held = FileLock(str(lock_path(f"sqlite:///{tmp_path / 'results.db'}", tmp_path)))
    held.acquire()  # an overlapping cron's run
    try:
        farm = subprocess.Popen(
            farm_argv("verify", "--all", "--config", str(config), "--wait", "120", "--log", log),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=cli_env(tmp_path),
        )
        assert farm.stdout is not None
        assert "disabled in farm.yaml" in farm.stdout.readline()
        farm.send_signal(signum)
        try:
            out, err = farm.communicate(timeout=30)  # not the whole --wait
        finally:
            if farm.poll() is None:
                farm.kill()
                farm.wait()
    finally:
        held.release()
    name = signal.Signals(signum).name
    assert farm.returncode == EXIT_INFRA, (farm.returncode, out, err)
    assert f"Error: farm verify was stopped by {name} while it waited for the run lock" in err, err
    assert "no run was stored" in err, err
    last = (tmp_path / "verify.log").read_text().splitlines()[-1]
    assert f"farm verify failed: farm verify was stopped by {name}" in last and "exit 4" in last, last
    assert _runs(tmp_path / "results.db") == [(1, "finished", EXIT_OK)]  # nothing of the stopped one


def _cron_env(tmp_path: Path, home: Path) -> dict[str, str]:
    return {**cli_env(tmp_path), "HOME": str(home), "LANG": "C", "LC_ALL": "C"}


def _verify_as_cron(tmp_path: Path, config: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return farm("verify", "--all", "--config", str(config), cwd=tmp_path, env=_cron_env(tmp_path, home), timeout=180)


def test_the_local_node_runs_under_a_home_that_is_no_folder(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)  # its node's workdir is absolute
    home = tmp_path / "nonexistent"
    done = _verify_as_cron(tmp_path, config, home)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and not home.exists(), done.stderr


def test_a_relative_workdir_under_a_home_that_is_no_folder_is_named_not_made_under_root(tmp_path: Path) -> None:
    config = toy_farm(tmp_path)
    config.write_text(config.read_text().replace(f"workdir: {tmp_path / 'node'}", "workdir: farm-work-rt93"))
    home = tmp_path / "nonexistent"
    done = _verify_as_cron(tmp_path, config, home)
    text = done.stdout + done.stderr
    assert done.returncode == EXIT_INFRA, text
    assert "its workdir 'farm-work-rt93' is under the farm's HOME" in text and str(home) in text, text
    assert "Traceback" not in text and "internal error" not in text, text
    assert not Path("/farm-work-rt93").exists() and not home.exists()


@pytest.mark.parametrize("command", [["report", "--format", "junit"], ["report", "--format", "json"], ["show", "1"]])
def test_stdout_on_a_full_disk_is_said_so_not_a_bug_in_farm(tmp_path: Path, command: list[str]) -> None:
    """A cron job's `farm report --format junit > /srv/ci/junit.xml` on a full disk (/dev/full)."""
    config = toy_farm(tmp_path)
    assert farm_cli(tmp_path, "verify", "--all", "--config", str(config)).returncode == EXIT_OK
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            farm_argv(*command, "--config", str(config)),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=cli_env(tmp_path),
            timeout=120,
            check=False,
        )
    assert done.returncode == EXIT_CONFIG, (done.returncode, done.stderr)
    assert done.stderr.startswith("Error: stdout: found a stream that cannot be written (No space left on device)")
    assert "--out FILE" in done.stderr and "bug in farm" not in done.stderr and "Exception" not in done.stderr


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for `signum` (/proc's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signum - 1) & 1)


def test_a_bisect_stopped_while_it_waits_for_the_run_lock_ends_at_once(tmp_path: Path) -> None:
    """Round 93's note: `farm bisect --wait 600` heard a SIGTERM during its lock's wait only once the
    whole wait was over (its handler noted the stop; the wait went on). It ends at once, exit 4."""
    root = tmp_path / "toy"
    config = toy_farm(root)
    env = {**cli_env(root), "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path)
    git = ["git", "-C", str(root), "-c", "user.name=farm test", "-c", "user.email=farm@test"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True, env=env)
    subprocess.run([*git, "add", "farm.yaml", "jobs", "kernels"], check=True, env=env)
    subprocess.run([*git, "commit", "-q", "-m", "toy"], check=True, env=env)
    (root / "NOTES.md").write_text("notes\n")
    subprocess.run([*git, "add", "NOTES.md"], check=True, env=env)
    subprocess.run([*git, "commit", "-q", "-m", "notes"], check=True, env=env)
    held = FileLock(str(lock_path(f"sqlite:///{root / 'results.db'}", root)))
    held.acquire()  # a cron's run
    try:
        command = farm_argv("bisect", "toy:plain", "--node", "here", "--good", "HEAD~1", "--bad", "HEAD")
        bisect = subprocess.Popen(
            [*command, "--wait", "120", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=root,
            env=env,
        )
        deadline = time.monotonic() + 60
        while not _catches(bisect.pid, signal.SIGTERM):  # its handlers are in: it may be stopped now
            assert bisect.poll() is None and time.monotonic() < deadline, bisect.communicate()
            time.sleep(0.02)
        time.sleep(0.5)
        clock = time.monotonic()
        bisect.send_signal(signal.SIGTERM)
        try:
            out, err = bisect.communicate(timeout=60)
        finally:
            if bisect.poll() is None:
                bisect.kill()
                bisect.wait()
    finally:
        held.release()
    assert bisect.returncode == EXIT_INFRA, (bisect.returncode, out, err)
    assert time.monotonic() - clock < 30, "not the whole --wait"
    assert "Error: farm bisect was stopped by SIGTERM while it waited for the run lock" in err, err
    assert not (root / "results.db").exists() or not _runs(root / "results.db")


@pytest.mark.parametrize("ended", [True, False])
def test_a_stop_after_the_run_is_stored_says_the_run_ended_not_that_it_kills(
    ended: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round 93's note: a SIGTERM during the report's render, the run stored whole, said "stopping run:
    no new cells; killing the running ones on every node" of a run with nothing left to stop."""
    from types import SimpleNamespace

    from orchestrator.cli.run_signals import stopping_on_signals

    stopped: list[str] = []
    run = SimpleNamespace(stopping=None, ended=ended, stop=stopped.append)  # a verify.Stoppable
    with stopping_on_signals(run):  # type: ignore[arg-type]
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.01)
    said = capsys.readouterr().err
    assert stopped == ["SIGTERM"]
    if ended:
        assert "the run has ended and is stored" in said and "killing" not in said, said
    else:
        assert "stopping run: no new cells; killing the running ones on every node" in said, said
