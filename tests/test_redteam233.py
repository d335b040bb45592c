"""Red-team round 233: the PostgreSQL store under a DBA's session settings (ALTER ROLE/DATABASE ... SET).

1. DateStyle other than ISO (`ALTER ROLE farm SET DateStyle = 'SQL, DMY'`, a European site's): psycopg
   parses only ISO timestamps, so every read of a run's or a result's time raised NotImplementedError:
   the run's writes went through (exit 0) but its report was never rendered ("internal error ... a
   bug in farm"), and `farm report`, `farm show` exited 70. Sessions now run in ISO, as in UTC.
2. extra_float_digits below its default (`ALTER ROLE farm SET extra_float_digits = -15`): the server
   printed each float with fewer digits, and psycopg read what it printed: a metric's 1234.5678901
   GFLOP/s came back 1000.0, so a cell's baseline was rounded and a slowdown past the tolerance was
   judged within it (a perf-regression stored as pass). Sessions now read floats exactly.
3. A number past PostgreSQL's 32-bit integer in an Integer column (a node's nvidia-smi saying GPU
   3000000000, its result's gpu_index; a node's bytes_shipped past 2 GiB): SQLite stored it, PostgreSQL
   refused the result ("integer out of range") and the run stopped, exit 5, its `farm import` refused
   the same. Both keep the same now, as a string past its column is cut (result_rows.fit).
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from test_metrics import ENV, metric, new_run
from test_metrics import result_record as metric_result
from test_redteam218 import _set_for_farm
from test_store_backends import BACKENDS, RUN_FIELDS, postgres_admin, postgres_url  # noqa: F401 (fixtures)

from orchestrator.metrics import Measured
from orchestrator.store.database import Store


def test_a_dbas_datestyle_reads_back_a_runs_times(postgres_url: str) -> None:  # noqa: F811
    """Before: NotImplementedError "can't parse timestamptz with DateStyle 'SQL, DMY'" on the first
    read of a time (the report, `farm show`: exit 70). Figure: DateStyle 'SQL, DMY' on the role in
    the database; the run's start and end read back as stored, in UTC."""
    Store(postgres_url).close()  # the farm's schema, before the DBA's change
    _set_for_farm(postgres_url, "DateStyle = 'SQL, DMY'")
    store = Store(postgres_url)
    try:
        run_id = store.begin_run(**RUN_FIELDS)
        store.finish_run(run_id, "finished", 0)
        (run,) = store.runs()
        assert run.id == run_id and run.ended_at is not None
        assert run.started_at.utcoffset() == timedelta(0) and run.started_at <= run.ended_at
    finally:
        store.close()


def test_a_dbas_extra_float_digits_keeps_a_metrics_values_exact(postgres_url: str) -> None:  # noqa: F811
    """Before: the baseline read back [1000.0] * 5 for five values of 1234.5678901, and a new 950
    (23 % slower, tolerance 10 %) was judged 5 % slower: not regressed. Figure: extra_float_digits
    -15 on the role in the database; the values read back exact, the 950 regressed."""
    Store(postgres_url).close()
    _set_for_farm(postgres_url, "extra_float_digits = -15")
    store = Store(postgres_url)
    store.journal = None
    try:
        for _ in range(5):
            run_id, snapshot = new_run(store)
            store.add_result(metric_result(run_id, snapshot), metrics=[metric("gflops", 1234.5678901)])
            store.finish_run(run_id, "finished", 0)
        found = store.metric_baseline("k", "v", "n", "NVIDIA H100", ["gflops"], ENV)
        assert found == {"gflops": [1234.5678901] * 5}
        judged = Measured("gflops", "GFLOP/s", "higher", 0.1, 950.0, "read", tuple(found["gflops"]))
        assert judged.regressed
        assert [m.value for m in store.metric_values(run_id=run_id)] == [1234.5678901]
    finally:
        store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gpu_index_past_32_bits_is_stored_alike_on_both_backends(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Before: on PostgreSQL exit 5, "DataError: (psycopg.errors.NumericValueOutOfRange) integer out of
    range", the pass unstored; on SQLite exit 0, gpu_index 3000000000. Figure: the toy farm's stand-in
    nvidia-smi lists its T4 as GPU 3000000000: exit 0 on both, the pass stored with no GPU index."""
    from farm_cli import farm
    from toyfarm import toy_on_t4

    config, env = toy_on_t4(tmp_path / "farm")
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else f"sqlite:///{tmp_path / 'r.db'}"
    config.write_text(config.read_text().replace("sqlite:///results.db", url))
    smi = tmp_path / "farm" / "smi" / "nvidia-smi"
    smi.write_text(re.sub(r"echo '0, ", "echo '3000000000, ", smi.read_text()))
    ran = farm("verify", "--all", cwd=config.parent, env=env, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    store = Store(url)
    try:
        (result,) = store.results(1)
        assert (result.outcome, result.gpu_index, result.gpu_uuid is not None) == ("pass", None, True)
    finally:
        store.close()
