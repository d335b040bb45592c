"""Red-team round 88: the run lock where file locks fail, lock files another user made, and the
cron mail's not-run line.

1. The run lock (store/lock.py) on a folder whose filesystem has no file locks (NFS without its
   lock daemon: flock ENOLCK; GlusterFS, FUSE: EOPNOTSUPP; filelock falls back for ENOSYS alone):
   every `farm verify` stopped at "cannot take the run lock ...: No locks available", no fix named.
   Running unlocked would let two writers into one database, so it stays an error, naming the
   folder and the fix: farm.yaml's `lock_dir`, a local folder every run of the database uses.
2. A lock file made by cron's `farm` user under umask 022 (0644) could not be opened for writing by
   a reviewer in the shared group: the render lock's PermissionError was raised as it came. Lock
   files are now made group-writable (0664), and one that is not names its owner and the fix.
4. The `--quiet` mail said `node here: not-run: ...` once per node: which cells have no verdict it
   did not say. It names the cells.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from farm_cli import farm
from toyfarm import toy_farm

from orchestrator.errors import LockError
from orchestrator.report.site_lock import LOCK_FILE, rendering
from orchestrator.store.lock import RunLock, lock_path, run_lock

# ------------------------------------------------------------ 1. a database folder with no file locks


def _no_locks_under(monkeypatch: pytest.MonkeyPatch, folder: Path, code: int) -> None:
    """flock fails with `code` for files in `folder` (its filesystem has no locks), works elsewhere."""
    real = fcntl.flock
    where = os.path.realpath(folder)

    def flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX and os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == where:
            raise OSError(code, os.strerror(code))
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_run_lock_where_flock_fails_names_the_folder_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    _no_locks_under(monkeypatch, tmp_path, code)
    with pytest.raises(LockError) as caught, run_lock(f"sqlite:///{tmp_path / 'results.db'}", tmp_path, 0):
        pass
    said = str(caught.value)
    assert str(tmp_path) in said and "no file locks" in said, said
    assert "lock_dir" in said, said  # the fix: farm.yaml's key


def test_lock_dir_places_the_run_lock_in_a_folder_with_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from orchestrator.cli import main
    from orchestrator.config.farm import load_farm

    config = toy_farm(tmp_path / "farm")
    config.write_text(config.read_text() + "lock_dir: ../locks\n")
    (tmp_path / "locks").mkdir()
    _no_locks_under(monkeypatch, tmp_path / "farm", errno.ENOLCK)
    farm = load_farm(config)
    assert farm.lock_dir == (tmp_path / "locks").resolve()
    done = CliRunner().invoke(main, ["verify", "--all", "--no-report", "--config", str(config)])
    assert done.exit_code == 0, done.output
    locks = [p.name for p in (tmp_path / "locks").iterdir()]
    assert any(name.endswith(".lock") for name in locks), locks
    # the lock in lock_dir still keeps a second run out
    with (
        RunLock(lock_path(farm.database_url, farm.root, farm.lock_dir)),
        pytest.raises(LockError, match="another farm run holds"),
        run_lock(farm.database_url, farm.root, 0, farm.lock_dir),
    ):
        pass


def test_a_lock_dir_that_is_no_folder_is_refused_at_load(tmp_path: Path) -> None:
    from orchestrator.config.farm import load_farm
    from orchestrator.errors import ConfigError

    config = toy_farm(tmp_path)
    config.write_text(config.read_text() + "lock_dir: nowhere\n")
    with pytest.raises(ConfigError) as caught:
        load_farm(config)
    said = str(caught.value)
    assert caught.value.key == "lock_dir" and str(config) in said and "not a folder" in said, said


# ------------------------------------------------------------ 2. a lock file another user made


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder every user may reach and write (pytest's tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="farm-rt88-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as_nobody(action: Callable[[], str]) -> str:
    """action()'s text (or its exception's, as `Type: message`) in a forked child running as nobody."""
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            said = action()
        except BaseException as err:  # reported to the parent
            said = f"{type(err).__name__}: {err}"
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    return said


def _take_run_lock(path: Path) -> str:
    with RunLock(path):
        return "taken"


def _render_lock(folder: Path) -> str:
    from orchestrator.report import site_lock

    site_lock._LOCKS.clear()  # the parent's lock objects: filelock refuses one inherited across fork
    with rendering(folder, wait=0):
        return "taken"


def test_lock_files_are_made_group_writable(shared_folder: Path) -> None:
    old = os.umask(0o022)  # cron's
    try:
        with RunLock(shared_folder / "results.db.lock"), rendering(shared_folder, wait=0):
            pass
    finally:
        os.umask(old)
    for name in ("results.db.lock", "results.db.lock.holder", LOCK_FILE):
        assert (shared_folder / name).stat().st_mode & stat.S_IWGRP, name
        os.chown(shared_folder / name, 0, pwd.getpwnam("nobody").pw_gid)  # the farm's group, nobody in it
    assert _as_nobody(lambda: _take_run_lock(shared_folder / "results.db.lock")) == "taken"
    assert _as_nobody(lambda: _render_lock(shared_folder)) == "taken"


def test_a_lock_file_another_user_made_0644_is_a_clear_error(shared_folder: Path) -> None:
    for name in ("results.db.lock", LOCK_FILE):
        (shared_folder / name).touch(mode=0o644)  # an older farm's, under umask 022
        (shared_folder / name).chmod(0o644)
    said = _as_nobody(lambda: _take_run_lock(shared_folder / "results.db.lock"))
    assert said.startswith("LockError: ") and "results.db.lock" in said and "chmod g+w" in said, said
    said = _as_nobody(lambda: _render_lock(shared_folder))
    assert said.startswith("LockError: ") and LOCK_FILE in said and "chmod g+w" in said, said


# ------------------------------------------------------------ 4. the cron mail's not-run line


def test_the_quiet_mails_not_run_line_names_the_cells(tmp_path: Path) -> None:
    from orchestrator.config.farm import load_farm
    from orchestrator.plan import plan_cells
    from orchestrator.progress import PlainListener
    from orchestrator.run.scheduler import FarmRun
    from orchestrator.store.database import Store

    class StopAtStart(PlainListener):
        run: FarmRun

        def run_started(self, run_id: int, cells: list) -> None:
            self.run.stop("SIGTERM")

    farm = load_farm(toy_farm(tmp_path, broken="fails"))
    printed = io.StringIO()
    listener = StopAtStart(printed, quiet=True)
    store = Store(farm.database_url)
    try:
        listener.run = FarmRun(farm, store, listener=listener, cache_dir=tmp_path / "archives")
        assert listener.run.execute(plan_cells(farm)).outcomes == {"not-run": 2}
    finally:
        store.close()
    lines = [line.split("] ", 1)[1] for line in printed.getvalue().splitlines()]
    assert len(lines) == 1, lines
    assert "toy:plain@here" in lines[0] and "toy:broken@here" in lines[0] and "2 cells" in lines[0], lines
    assert "the run was stopped (SIGTERM)" in lines[0], lines
    json.dumps(lines)  # plain text


# ------------------------------------------------------------ 3. what a SIGKILLed run left on its nodes


def test_a_killed_runs_processes_are_reaped_at_the_next_start_and_no_others(tmp_path: Path) -> None:
    """A SIGKILLed `farm verify` left its runner and a hung kernel on the node until the kernel's
    limit, the next run's cell waiting on the GPU meanwhile. The next start, holding the run
    lock, reaps the processes of the runs it marks aborted (their FARM_RUN token), and of no
    other run: one the database shows finished keeps its processes."""
    import sqlite3
    import subprocess

    config = toy_farm(tmp_path)
    args = ("verify", "--all", "--no-report", "--config", str(config))
    assert farm(*args, text=False).returncode == 0
    assert farm(*args, text=False).returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:  # run 1 was SIGKILLed: still marked running
        db.execute("UPDATE runs SET status = 'running', token = 'dead0000dead' WHERE id = 1")
        db.execute("UPDATE runs SET token = 'live0000live' WHERE id = 2")
    dead = subprocess.Popen(["sleep", "300"], env={**os.environ, "FARM_RUN": "dead0000dead"})
    other = subprocess.Popen(["sleep", "300"], env={**os.environ, "FARM_RUN": "live0000live"})
    try:
        done = farm(*args)
        assert done.returncode == 0, done.stderr
        assert dead.wait(timeout=10) == -9  # killed by the start, not left to its limit
        assert other.poll() is None  # a run the database shows finished: not this start's to kill
        assert "run 1 was interrupted" in done.stdout and "killed 1 process it left on here" in done.stdout, done.stdout
    finally:
        for process in (dead, other):
            process.kill()
            process.wait()
