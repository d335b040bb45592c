"""Red-team round 143: the night operator's cron run, and what else runs beside it.

Broke (before/after):
- `farm report --format junit|json --out FILE` where FILE is the run lock in farm.yaml's
  `lock_dir` (or, for PostgreSQL, the `.farm-*.lock` in the farm's folder), or the lock's
  `.holder` record beside results.db, was written: the export's rename put a new file in the
  lock's place, while a running `farm verify` held its flock on the old one, so a second
  `farm verify` took the "free" lock and ran beside it on the same database. Those files are
  the farm's own now, refused (exit 3) as results.db's `.lock` already was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import LockError
from orchestrator.store.lock import RunLock, lock_path
from tests.farm_cli import farm
from tests.toyfarm import toy_farm


def _farm_with_a_run(root: Path, lock_dir: Path | None) -> Path:
    config = toy_farm(root)
    if lock_dir is not None:
        lock_dir.mkdir()
        config.write_text(config.read_text() + f"lock_dir: {lock_dir}\n")
    done = farm("verify", "--all", "--no-report", "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    return config


@pytest.mark.parametrize("name", ["lock", "holder"])
def test_an_export_over_the_run_lock_is_refused_and_keeps_a_second_run_out(tmp_path: Path, name: str) -> None:
    lock_dir = tmp_path / "locks"
    config = _farm_with_a_run(tmp_path / "farm", lock_dir)
    lock = lock_path(f"sqlite:///{tmp_path / 'farm' / 'results.db'}", tmp_path / "farm", lock_dir)
    assert lock.parent == lock_dir and lock.exists(), sorted(lock_dir.iterdir())
    target = lock if name == "lock" else lock.with_name(lock.name + ".holder")
    with RunLock(lock):  # tonight's `farm verify`, holding the lock
        before = lock.stat().st_ino
        done = farm("report", "--format", "junit", "--out", str(target), "--config", str(config))
        assert done.returncode == 3, done.stdout + done.stderr
        assert str(target) in done.stderr and "lock" in done.stderr, done.stderr
        assert lock.stat().st_ino == before
        with pytest.raises(LockError), RunLock(lock):  # a second run still waits for the first
            pass


def test_an_export_over_the_holder_beside_results_db_is_refused(tmp_path: Path) -> None:
    config = _farm_with_a_run(tmp_path, None)
    holder = tmp_path / "results.db.lock.holder"
    assert holder.exists()
    done = farm("report", "--format", "json", "--out", str(holder), "--config", str(config))
    assert done.returncode == 3, done.stdout + done.stderr
    assert str(holder) in done.stderr, done.stderr
    assert holder.read_text().startswith('{"pid"'), holder.read_text()[:80]
