"""Review round 193, the night operator's: `farm verify --all --quiet --log FILE` from cron, read the
next morning through its exit code, its lines and its log, failing first.

1. A farm.yaml or job file that no longer loads (an edit made during the day) was exit 3 with its
   `Error:` line in the cron mail, but `--log` was never written: its last line stayed the night
   before's green `exit 0` verdict. Now a log the farm already writes ends with the dated
   `farm verify failed: ...; exit 3 (configuration error)` line; a file the farm did not write
   (farm.yaml itself, any other file) is left alone, as the log cannot be checked without a farm.
2. A `verify` stopped before its run was stored (a SIGTERM while `--wait` waited for the lock)
   ended `--log` with "exit 4 (every verdict as expected, but some cells could not run (infra))":
   no cell ran and there was no verdict. It now says the run was stopped before it started.
3. An SSH node whose known_hosts file does not exist (the default ~/.ssh/known_hosts under a HOME
   with no .ssh, as cron or systemd may give) was refused "host ... is not in FILE": the operator
   greps a file that is not there. It now says the file does not exist, names the node's
   `known_hosts` key, and says to give it as an absolute path.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from farm_cli import farm_argv
from faults import faults_job, faults_variant
from faults import write_fault_farm as write_farm
from filelock import FileLock
from nodes import Fleet
from test_faults import MIN75, cli_env, farm_cli, results
from toyfarm import toy_farm

from orchestrator.errors import EXIT_CONFIG, EXIT_INFRA, EXIT_OK
from orchestrator.store.lock import lock_path


def _last_line(log: Path) -> str:
    return log.read_text().splitlines()[-1]


def test_a_farm_yaml_that_no_longer_loads_ends_the_log(tmp_path: Path) -> None:
    """Before: the log's last line stayed "run 1: 1 as expected, 0 not, 0 infra; exit 0" over a night
    that was exit 3. Figure: 2 load failures (farm.yaml, a job file) each end the log; farm.yaml
    named as --log, and a log the farm never wrote, are not appended to (0 bytes changed)."""
    config = toy_farm(tmp_path)
    log = tmp_path / "verify.log"
    first = farm_cli(tmp_path, "verify", "--all", "--config", str(config), "--log", str(log))
    assert first.returncode == EXIT_OK, first.stdout + first.stderr
    assert "exit 0" in _last_line(log)
    good = config.read_text()
    config.write_text(good.replace("transport: local", "transprot: local"))
    broken = farm_cli(tmp_path, "verify", "--all", "--quiet", "--config", str(config), "--log", str(log))
    assert broken.returncode == EXIT_CONFIG, broken.stderr
    last = _last_line(log)
    assert "farm verify failed:" in last and "transprot" in last and "exit 3 (configuration error)" in last, last
    config.write_text(good)
    (tmp_path / "jobs" / "zz.yaml").write_text("{\n")
    broken = farm_cli(tmp_path, "verify", "--all", "--quiet", "--config", str(config), "--log", str(log))
    assert broken.returncode == EXIT_CONFIG, broken.stderr
    assert "zz.yaml" in _last_line(log) and "exit 3" in _last_line(log), _last_line(log)
    # a --log the farm did not write is not appended to: with no farm loaded it cannot be checked
    other = tmp_path / "notes.txt"
    other.write_text("an operator's notes\n")
    for target in (other, config):
        before = target.read_bytes()
        done = farm_cli(tmp_path, "verify", "--all", "--config", str(config), "--log", str(target))
        assert done.returncode == EXIT_CONFIG and target.read_bytes() == before, done.stderr


def test_a_stop_before_the_run_does_not_log_every_verdict_as_expected(tmp_path: Path) -> None:
    """Before: "farm verify failed: farm verify was stopped by SIGTERM while it waited for the run
    lock: ...; exit 4 (every verdict as expected, but some cells could not run (infra))".
    Figure: 1 SIGTERM during --wait; exit 4; the log's line says no cell ran."""
    config = toy_farm(tmp_path)
    log = tmp_path / "verify.log"
    config.write_text(config.read_text() + "  off:\n    transport: local\n    enabled: false\n")
    held = FileLock(str(lock_path(f"sqlite:///{tmp_path / 'results.db'}", tmp_path)))
    held.acquire()  # an overlapping cron's run
    try:
        farm = subprocess.Popen(
            farm_argv("verify", "--all", "--config", str(config), "--wait", "120", "--log", str(log)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=cli_env(tmp_path),
        )
        assert farm.stdout is not None
        assert "disabled in farm.yaml" in farm.stdout.readline()  # it is at the lock now
        farm.send_signal(signal.SIGTERM)
        _, err = farm.communicate(timeout=30)
    finally:
        held.release()
    assert farm.returncode == EXIT_INFRA, err
    last = _last_line(log)
    assert "exit 4 (the run was stopped before it started: no cell ran, no verdict)" in last, last
    assert "every verdict as expected" not in last, last


def test_a_known_hosts_that_does_not_exist_is_said_so(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Before: "host [127.0.0.1]:PORT is not in HOME/.ssh/known_hosts (strict host-key checking)",
    of a file that is not there. Figure: 1 node, its 1 cell infra-error at probe; the reason says
    the file does not exist and names the node's `known_hosts`."""
    missing = tmp_path / "home" / ".ssh" / "known_hosts"
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work", known_hosts=str(missing))}
    config = write_farm(tmp_path, nodes, [faults_job({"quick": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0")})])
    done = farm_cli(tmp_path, "verify", "--all", "--quiet", "--config", str(config), "--no-report")
    assert done.returncode == EXIT_INFRA, done.stdout + done.stderr
    row = results(tmp_path / "results.db", 1)[("t4", "quick")]
    assert (row["outcome"], row["failed_stage"]) == ("infra-error", "probe"), row["reason"]
    assert f"{missing} does not exist" in row["reason"], row["reason"]
    assert "node 't4''s `known_hosts`" in row["reason"] and "absolute path" in row["reason"], row["reason"]
    assert f"{missing} does not exist" in done.stdout, done.stdout  # the cron mail's line says so too
