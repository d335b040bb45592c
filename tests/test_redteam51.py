"""Red-team round 51: the operator's night (cron's --quiet mail, --log, the exit code)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from farm_cli import farm, farm_argv, farm_env
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.store.lock import run_lock


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


def as_another_user(argv: list[str]) -> list[str]:
    """Run as if cron's user were not the one who made results.db: as root, without the
    capabilities that let root read and write every file; else as this user, unchanged."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: cannot drop the file capabilities")
    caps = "-dac_override,-dac_read_search,-fowner"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *argv]


def test_a_database_this_user_cannot_write_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """cron run as another user than results.db's (or a umask-077 night before): the mail said
    "unable to open database file" (no cause, nothing to do), or "attempt to write a readonly
    database ... farm import results.db.journal/TOKEN.jsonl": a journal of a run that was never
    stored, left behind each night (prune keeps it for good), pointing at an import that
    cannot write either. Now: why, what to do, and nothing written."""
    config = toy_farm(tmp_path)
    log = tmp_path / "log" / "verify.log"
    assert nightly(config, log).returncode == 0
    journals = sorted((tmp_path / "results.db.journal").iterdir())
    for mode in (0o444, 0o000):  # another user's results.db: readable (0644) or not (0600)
        (tmp_path / "results.db").chmod(mode)
        argv = farm_argv("verify", "--all", "--quiet", "--log", str(log))
        done = subprocess.run(
            as_another_user([*argv, "--config", str(config)]),
            capture_output=True,
            text=True,
            env=farm_env(),
            timeout=300,
            check=False,
        )
        assert done.returncode == 5, done.stdout + done.stderr
        assert "results.db" in done.stderr and "cannot be read and written by this process" in done.stderr
        assert "run the farm as" in done.stderr and "farm import" not in done.stderr, done.stderr
        assert sorted((tmp_path / "results.db.journal").iterdir()) == journals  # no journal of a run never stored
        assert "exit 5" in log.read_text().splitlines()[-1]
    (tmp_path / "results.db").chmod(0o644)
    # another user's lock file was exit 6, "another farm run holds the lock": none did
    (tmp_path / "results.db.lock").chmod(0o444)
    argv = farm_argv("verify", "--all", "--quiet", "--config", str(config))
    done = subprocess.run(
        as_another_user(argv), capture_output=True, text=True, env=farm_env(), timeout=300, check=False
    )
    assert done.returncode == 5 and "results.db.lock cannot be read and written" in done.stderr, done.stderr
    (tmp_path / "results.db.lock").chmod(0o644)
    assert nightly(config, log).returncode == 0


def test_the_crontab_line_in_crons_environment_says_how_to_find_nvcc(tmp_path: Path) -> None:
    """The README's crontab line, from a fresh shell with cron's environment (PATH=/usr/bin:/bin,
    no HOME, LANG=C): a node whose nvcc is found by PATH by hand (/usr/local/cuda/bin) was infra
    every night, the mail saying "no working nvcc at 'nvcc' (... No such file ...)" and not what
    to do: give the node's `nvcc:` its full path."""
    if shutil.which("nvcc", path="/usr/bin:/bin"):
        pytest.skip("nvcc is on cron's own PATH here")
    toy_farm(tmp_path)
    env = farm_env({"PATH": "/usr/bin:/bin", "LANG": "C", "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    command = shlex.join(farm_argv("verify", "--all", "--quiet", "--trigger", "cron", "--wait", "600"))
    line = f"cd {tmp_path} && {command}"
    done = subprocess.run(["/bin/sh", "-c", line], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "exit 4" in done.stdout.splitlines()[-1]
    assert "not on PATH (/usr/bin:/bin)" in done.stdout and "`nvcc:` in farm.yaml" in done.stdout, done.stdout


def test_a_log_rotated_mid_run_gets_the_rest_of_the_run_in_the_new_file(tmp_path: Path) -> None:
    """logrotate's move-and-create mid-run (a long night under a daily rotation): the run kept
    writing into the moved file, and the new verify.log the operator reads stayed empty: no
    verdict for the night. copytruncate: the lines go on after the cut, never after a hole."""
    config = toy_farm(tmp_path)
    job = tmp_path / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("build: 'g++", "build: 'sleep 2 && g++"))  # a cell that takes a while
    log = tmp_path / "log" / "verify.log"
    for run, rotation in ((1, "create"), (2, "copytruncate")):
        argv = farm_argv("verify", "--all", "--quiet", "--log", str(log))
        running = subprocess.Popen([*argv, "--config", str(config)], stdout=subprocess.PIPE, text=True, env=farm_env())
        deadline = time.monotonic() + 60
        while not (log.is_file() and f"run {run}: 1 cells on 1 nodes" in log.read_text()):
            assert time.monotonic() < deadline and running.poll() is None
            time.sleep(0.05)
        if rotation == "create":
            log.rename(log.with_name("verify.log.1"))
            log.touch()
        else:
            shutil.copyfile(log, log.with_name("verify.log.2"))
            os.truncate(log, 0)
        out, _ = running.communicate(timeout=120)
        assert running.returncode == 0, out
        text = log.read_text()
        assert "\0" not in text and text.splitlines()[-1].endswith("exit 0"), (rotation, text)
        assert "toy:plain@here" in text, (rotation, text)
