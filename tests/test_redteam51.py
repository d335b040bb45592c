"""Red-team round 51: the operator's night (cron's --quiet mail, --log, the exit code)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.store.lock import run_lock


def farm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )


def nightly(config: Path, log: Path) -> subprocess.CompletedProcess:
    """The README's cron line."""
    argv = ["verify", "--all", "--quiet", "--trigger", "cron", "--log", str(log), "--wait", "0"]
    return farm(*argv, "--config", str(config))


def test_a_night_that_could_not_run_says_so_in_the_log_not_the_night_befores_green(tmp_path: Path) -> None:
    """A cron run refused at its start (a lock held past --wait: exit 6; a database that cannot
    be opened: exit 5) wrote nothing to --log: the log's last line stayed the night before's
    "run 1: ... exit 0", so the operator reading the log saw green for a night that ran nothing."""
    config = toy_farm(tmp_path)
    log = tmp_path / "log" / "verify.log"
    first = nightly(config, log)
    assert first.returncode == 0, first.stdout + first.stderr
    assert log.read_text().splitlines()[-1].endswith("exit 0")

    with run_lock(load_farm(config).database_url, tmp_path, 0):  # a run still going at 02:30
        held = nightly(config, log)
    assert held.returncode == 6, held.stdout + held.stderr
    last = log.read_text().splitlines()[-1]
    assert "exit 6" in last and "another farm run holds" in last and "--wait" in last, last

    (tmp_path / "results.db").write_bytes(b"not a database, whatever it once was\n" * 200)
    broken = nightly(config, log)
    assert broken.returncode == 5, broken.stdout + broken.stderr
    last = log.read_text().splitlines()[-1]
    assert "exit 5" in last and "cannot open the results database" in last, last
    # the log says which night: a line's time of day alone cannot tell tonight from the night before
    assert last.startswith("[20"), last
