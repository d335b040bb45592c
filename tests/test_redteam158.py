"""Red-team round 158: time (the farm host's wall clock stepped by NTP, a login node's clock
stepped mid-job), against a real SQLite file, real journals, `farm import` and the Slurm
transport's own shell.

Broke (before/after):
- A run whose farm host's clock was hours ahead (then corrected by NTP) lost its database
  writes; the next night's run, on the corrected clock, stored a newer verdict. `farm import` of
  the first run's journal took it as the newest run: its start (stamped ahead) read later than
  the newest run's, so the older run's pass stood over the newer night's fail. A journal whose
  start is after this host's clock now has a start no clock could have read yet: its run's order
  cannot be told by starts, and the import is refused (store/run_order.py), naming
  --in-given-order for a run that really came after, and a database of its own otherwise.
- The Slurm transport waits for a job still COMPLETING (its Epilog running) up to a deadline the
  login node's shell set before srun by `date +%s`: a login node whose clock NTP stepped back
  during the job waited past the farm's own budget, which killed the command and reported a job
  that had finished as still running at its time limit (no verdict, the kernel's run lost). The
  deadline is kept by the login node's boot-time clock (/proc/uptime) where it has one.
"""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from farm_cli import farm
from test_journal_prune import journaled_run
from toyfarm import toy_farm

from orchestrator.store.database import Store
from orchestrator.transport.slurm_query import deadline_setting, record_query

AHEAD = timedelta(hours=3)


def clock(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> None:
    """The farm host's wall clock `offset` off for the store (its run starts, ends, journals)."""

    class Shifted(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime.now(tz) + offset

    monkeypatch.setattr("orchestrator.store.recording.datetime", Shifted)


def test_a_journal_started_under_a_clock_ahead_is_not_imported_as_the_newest_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 1 stored; run 2 under a clock 3 h ahead, its database writes lost (only its journal);
    run 3 on the corrected clock, stored. Run 2's journal was imported as run 3's successor (the
    newest run, its verdicts standing over run 3's)."""
    db = tmp_path / "results.db"
    store = Store(f"sqlite:///{db}")
    journaled_run(store, tmp_path / "results.db.journal")
    lost = Store(f"sqlite:///{tmp_path / 'lost.db'}")  # run 2's writes: not in results.db
    with monkeypatch.context() as ahead:
        clock(ahead, AHEAD)
        _, journal = journaled_run(lost, tmp_path / "results.db.journal")
    lost.close()
    journaled_run(store, tmp_path / "results.db.journal")
    store.close()
    config = toy_farm(tmp_path / "farm")
    url = f"sqlite:///{db}"
    refused = farm("import", str(journal), "--config", str(config), "--database", url)
    said = " ".join(refused.stderr.split())
    assert refused.returncode != 0, refused.stdout
    assert "after this host's clock now" in said and "farm import --in-given-order" in said, said
    assert "database of its own" in said, said
    store = Store(url, create=False)
    assert len(store.runs()) == 2  # nothing imported
    store.close()
    # the operator who knows it came after says so
    done = farm("import", "--in-given-order", str(journal), "--config", str(config), "--database", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"imported {journal} as run 3"), done.stdout


def test_a_login_node_clock_stepped_back_does_not_hold_a_completing_job_past_its_budget(tmp_path: Path) -> None:
    """The login side's COMPLETING wait, in a real shell: squeue says COMPLETING forever, and the
    login node's `date` reads an hour back from its second call (NTP stepping it mid-job). Its
    budget of 10 s leaves 2 s for the wait; the wait ran on until killed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\necho '41|COMPLETING|gpu1|None|1G'\n")
    calls = tmp_path / "date-calls"
    (bin_dir / "date").write_text(
        "#!/bin/sh\n"
        f"n=$(cat {calls} 2>/dev/null || echo 0); echo $((n + 1)) > {calls}\n"
        f'now=$(/bin/date +%s); [ "$n" = 0 ] && echo $now || echo $((now - 3600))\n'
    )
    for tool in ("squeue", "date"):
        (bin_dir / tool).chmod(0o755)
    script = f"{deadline_setting(10)}rc=0; {record_query('farm-n-x', 'abc', 1)}"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    began = time.monotonic()
    try:
        done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("the COMPLETING wait outlived its budget: the login node's clock stepped back")
    assert time.monotonic() - began < 8
    assert "@@slurm-job-abc 41|COMPLETING|gpu1|None|1G" in done.stdout, done.stdout + done.stderr
