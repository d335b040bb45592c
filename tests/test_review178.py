"""Review round 178: the store's wait for a PostgreSQL server gone mid-run (review 175), looked at again.

The server is the tests' real one behind test_review175's TCP proxy (never a restart of the shared
server): a COMMIT that reaches the server as its connection is cut, sessions cut, connections refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from farm_cli import farm_argv, farm_env
from sqlalchemy import create_engine, select
from sqlalchemy.pool import NullPool
from test_redteam87 import RUN
from test_review175 import Proxy, _count, proxied  # noqa: F401 (fixture)
from test_store_backends import (  # noqa: F401 (fixtures)
    postgres_admin,
    postgres_url,
    result_record,
)
from toyfarm import toy_on_t4

from orchestrator.errors import StoreError
from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.lock import DatabaseLock
from orchestrator.store.records import AttemptRecord
from orchestrator.store.tables import Attempt, PlannedCell, ResultRow, Run

LONG_CARD = "NVIDIA " + "H" * 300  # a node's card name past results.device's 255 characters (cut by fit)


def test_a_landed_commit_of_a_long_card_name_is_found_not_stored_twice(
    tmp_path: Path,
    proxied: tuple[str, Proxy],  # noqa: F811
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: two result rows and two attempts of one cell. The landed lookup compared the card
    name as the node said it (301 characters) with the row's, cut to 255 (result_rows.fit): never
    found, so the retry stored the cell a second time. Figure: the result's COMMIT reaches the server
    as its connection is cut; the retry finds that row (one result, one attempt)."""
    url, proxy = proxied
    store = Store(url)
    store.outage.wait, store.outage.say = 20, lambda _line: None
    store.journal = Journal(tmp_path / "journal", "long")
    try:
        run_id = store.begin_run(host="a", config_file="f", token="long", **RUN)
        record = dataclasses.replace(result_record(run_id, None, 1), device=LONG_CARD)
        tried = AttemptRecord(run_id=run_id, node="n", kernel="k", variant="v1", attempt=1, status="ok")
        proxy.cut_after_commit = True
        store.add_result(record, [tried])
        proxy.cut_after_commit = True  # the planned cells of a node of several card models, likewise
        store.add_planned(run_id, [("k", "v1", "n", LONG_CARD), ("k", "v2", "n", LONG_CARD)])
    finally:
        store.close()
    assert _count(postgres_url, ResultRow, run_id) == 1
    assert _count(postgres_url, Attempt, run_id) == 1
    assert _count(postgres_url, PlannedCell, run_id) == 2


SLEEPY = """\
#include <cstdio>
#include <unistd.h>
int main() { usleep(700000); std::printf("toy: PASS\\n"); return 0; }
"""


def test_a_sigterm_while_the_server_is_away_stops_the_run_promptly(
    tmp_path: Path,
    proxied: tuple[str, Proxy],  # noqa: F811
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: the run went on for the whole store_wait (120 s by default; systemd's stop timeout is
    90 s, then SIGKILL) after a SIGTERM: each node's write, and the run's end, kept retrying a server
    that stayed away. Figure: store_wait 120, the server gone after the first result, SIGTERM: the
    run is over in seconds, not exit 0, and its error names the journal to import."""
    url, proxy = proxied
    config, env = toy_on_t4(tmp_path / "farm", source=SLEEPY)
    job = config.parent / "jobs" / "toy.yaml"
    plain = job.read_text().split("  plain:\n", 1)[1]
    job.write_text(job.read_text() + "".join(f"  v{i}:\n{plain}" for i in range(2, 6)))
    config.write_text(config.read_text().replace("sqlite:///results.db", url) + "store_wait: 120\n")
    run = subprocess.Popen(
        farm_argv("verify", "--all"),
        cwd=config.parent,
        env=farm_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None:
            with contextlib.suppress(Exception):
                if _count(postgres_url, ResultRow, 1) >= 1:
                    break
            time.sleep(0.1)
        proxy.down()
        time.sleep(2)  # its next result waits on the server
        run.send_signal(signal.SIGTERM)
        began = time.monotonic()
        out, err = run.communicate(timeout=100)
        took = time.monotonic() - began
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert took < 30, (took, out, err)
    assert run.returncode not in (0, 1), (run.returncode, out, err)
    assert "farm import" in err, err


def _away_for(proxy: Proxy, seconds: float) -> threading.Thread:
    """The server gone now, back after `seconds` (a restart), in the background."""
    proxy.down()
    back = threading.Thread(target=lambda: (time.sleep(seconds), proxy.up()), daemon=True)
    back.start()
    return back


@pytest.mark.parametrize("read", ["recorded_binaries", "metric_baseline", "unfinished_cells", "results"])
def test_the_runs_own_reads_wait_out_a_server_gone_too(
    tmp_path: Path,
    proxied: tuple[str, Proxy],  # noqa: F811
    read: str,
) -> None:
    """Before: StoreError "failed reading: ... connection refused" at once, store_wait 20: a node whose
    probe ended during a restart read its cached builds' binaries (node_work.py), a cell with metrics
    its baseline (cell_work.py), the run's end its unfinished cells and results (scheduler.py), and
    the run stopped, exit 5, as before review 175. Figure: the server away for 2 s; the read waits."""
    url, proxy = proxied
    store = Store(url)
    store.outage.wait, store.outage.say = 20, lambda _line: None
    store.journal = Journal(tmp_path / "journal", "reads")
    try:
        run_id = store.begin_run(planned=[("k", "v1", "n", "")], host="a", config_file="f", token="reads", **RUN)
        calls = {
            "recorded_binaries": lambda: store.recorded_binaries("n", ["key"]),
            "metric_baseline": lambda: store.metric_baseline("k", "v1", "n", "", ["seconds"], ""),
            "unfinished_cells": lambda: store.unfinished_cells(run_id),
            "results": lambda: store.results(run_id),
        }
        back = _away_for(proxy, 2.0)
        began = time.monotonic()
        found = calls[read]()
        assert time.monotonic() - began >= 1.5
        back.join()
    finally:
        store.close()
    assert found in ({"key": None}, {"seconds": []}, [("k", "v1", "n", "")], []), found


def test_another_farm_that_took_the_lock_during_the_outage_stops_this_run_for_good(
    tmp_path: Path,
    proxied: tuple[str, Proxy],  # noqa: F811
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: the first write stopped ("another farm run may hold it now"), but the lock's check
    kept the new session it made, which answered the next check: the run's end (and any other
    thread's result) was written into the run the other farm had closed, while it held the lock.
    Figure: while the server was away from this run, another farm took the free run lock and closed
    this run aborted; this run's writes stop at once (not after store_wait 30), for good."""
    url, proxy = proxied
    with DatabaseLock(url, 0):
        store = Store(url)
        store.outage.wait, store.outage.say = 30, lambda _line: None
        store.journal = Journal(tmp_path / "journal", "window")
        run_id = store.begin_run(planned=[("k", "v1", "n", "")], host="a", config_file="f", token="window", **RUN)
        proxy.down()
        time.sleep(0.5)  # the server sees this run's lock session end
        with DatabaseLock(postgres_url, 5):
            other = Store(postgres_url)
            assert [a[:2] for a in other.abort_unfinished_runs()] == [(run_id, 1)]
            proxy.up()
            time.sleep(1.1)  # a restart and another farm's start take longer than lock.CHECK_EVERY
            began = time.monotonic()
            with pytest.raises(StoreError, match="run lock"):
                store.add_result(result_record(run_id, None, 1))
            with pytest.raises(StoreError):
                store.finish_run(run_id, "finished", 0)
            assert time.monotonic() - began < 10
            other.close()
        with pytest.raises(StoreError):  # the other farm gone, the lock free: still no write
            store.finish_run(run_id, "finished", 0)
        store.close()
    engine = create_engine(postgres_url, poolclass=NullPool)
    try:
        with engine.connect() as db:
            assert db.execute(select(Run.status)).scalars().all() == ["aborted"]
            assert db.execute(select(ResultRow.outcome)).scalars().all() == ["not-run"]
    finally:
        engine.dispose()
