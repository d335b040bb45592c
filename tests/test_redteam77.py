"""Red-team round 77: what round 76 left. Speed values that certify nothing still fed the perf
baseline: values measured on a stand-in or unconfirmed card (results.real_gpu false) and values
of runs that never finished (aborted, or still "running" after a SIGKILL) judged the next real
run of the same cell, perf-regression or not. A kernel page's trend drew the values of two units
on one axis after a job's metric `unit:` changed (100 GFLOP/s beside 0.1 TFLOP/s: a cliff that is
no slowdown). The error messages: an unusable URL in FARM_DATABASE was reported as `--database:
...`; `sqlite:///results.db?timeout=abc` (FARM_DATABASE, --database or farm.yaml's `database`)
was a bare "could not convert string to float", no key, nothing expected; `farm jobs toy:plain`
said "no job for kernel 'toy:plain'", not that `jobs` takes a kernel name. And the JSON export
carried no metric values or speed verdicts per cell: a CI step reading it saw a perf-regression's
outcome but not its figures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from farm_cli import farm
from test_metrics import ENV, metric, new_run, result_record
from test_redteam76 import (
    night,
    speedy,  # noqa: F401 - round 76's fixture
)
from toyfarm import toy_farm

from orchestrator.report import grids, trends
from orchestrator.store.database import Store

# ------------------------------------------------------------ 1. what a baseline is made of


def test_a_baseline_holds_only_finished_runs_values_on_the_same_kind_of_card(tmp_path: Path) -> None:
    """Five finished nights on a confirmed H100 at ~100 GFLOP/s. Then two runs that did not
    finish (one aborted, one left "running" by a SIGKILLed farm) at 1 GFLOP/s, and three finished
    runs on a stand-in card at 50: none of them is the confirmed card's baseline, and the
    stand-in's values judge only stand-in values (a farm's tests, a dry run on a laptop)."""
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None

    def night(value: float, status: str | None = "finished", real: bool = True) -> None:
        run_id, snapshot = new_run(store)
        record = replace(result_record(run_id, snapshot), real_gpu=real)
        store.add_result(record, metrics=[metric("gflops", value)])
        if status is not None:
            store.finish_run(run_id, status, 0)

    for value in (100.0, 101.0, 99.0, 100.0, 102.0):
        night(value)
    night(1.0, "aborted")
    night(1.0, None)  # still "running": its farm was killed
    for _ in range(3):
        night(50.0, real=False)
    base = ("k", "v", "n", "NVIDIA H100", ["gflops"], ENV)
    assert store.metric_baseline(*base, real_gpu=True) == {"gflops": [100.0, 101.0, 99.0, 100.0, 102.0]}
    assert store.metric_baseline(*base, real_gpu=False) == {"gflops": [50.0, 50.0, 50.0]}
    store.close()


# ------------------------------------------------------------ 2. a trend in one unit


def test_a_trend_draws_only_the_values_in_its_current_unit_and_says_so() -> None:
    """Three results in GFLOP/s, then two in TFLOP/s (the job's `unit:` edited): one axis from
    0.1 to 101 with both units' values on it read as a thousandfold slowdown."""
    rows = [
        (i, i, "k", "v", "n", "H100", "gflops", value, unit, "higher", None, False)
        for i, (value, unit) in enumerate(
            [(100.0, "GFLOP/s"), (101.0, "GFLOP/s"), (99.0, "GFLOP/s"), (0.1, "TFLOP/s"), (0.102, "TFLOP/s")], 1
        )
    ]
    (series,) = trends.trend_series(rows, set())["k"]["gflops"]
    assert series.unit == "TFLOP/s" and [p.value for p in series.points] == [0.1, 0.102]
    ((_name, _series, shown),) = grids.trend_rows({"gflops": [series]})
    assert "3 earlier values in GFLOP/s not drawn" in str(shown), shown
    # one unit throughout: no note
    ((_name, _series, plain),) = grids.trend_rows({"gflops": trends.trend_series(rows[:3], set())["k"]["gflops"]})
    assert "not drawn" not in str(plain)


# ------------------------------------------------------------ 3. error messages


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    return toy_farm(tmp_path)


def test_an_unusable_url_in_farm_database_is_named_as_farm_database(toy: Path) -> None:
    for url in ("sqlite://", f"sqlite:///{toy.parent}/no/such/folder/r.db"):
        done = farm("verify", "--all", "--no-report", "--config", str(toy), extra_env={"FARM_DATABASE": url})
        assert done.returncode == 3, done.stderr
        assert done.stderr.startswith("Error: FARM_DATABASE: found"), done.stderr
    # on the command line it is still --database
    done = farm("verify", "--all", "--no-report", "--config", str(toy), "--database", "sqlite://")
    assert done.returncode == 3 and done.stderr.startswith("Error: --database: found"), done.stderr


def test_a_sqlite_timeout_that_is_no_number_names_the_key_and_what_it_takes(toy: Path) -> None:
    url = f"sqlite:///{toy.parent}/results.db?timeout=abc"
    tries = [
        ("FARM_DATABASE", ["verify", "--all", "--no-report"], {"FARM_DATABASE": url}),
        ("--database", ["verify", "--all", "--no-report", "--database", url], {}),
        ("FARM_DATABASE", ["report", "--format", "json"], {"FARM_DATABASE": url}),  # a reading command too
    ]
    for where, args, env in tries:
        done = farm(*args, "--config", str(toy), extra_env=env)
        assert done.returncode == 3, (args, done.stderr)
        said = done.stderr
        assert said.startswith(f"Error: {where}: ") and "timeout" in said and "a number of seconds" in said, said
        assert "could not convert" not in said
    toy.write_text(toy.read_text().replace("sqlite:///results.db", "sqlite:///results.db?timeout=abc"))
    for args in (["verify", "--all", "--no-report"], ["report", "--format", "json"]):
        done = farm(*args, "--config", str(toy))
        assert done.returncode == 3, done.stderr
        assert done.stderr.startswith(f"Error: {toy}: database: ") and "a number of seconds" in done.stderr
    toy.write_text(toy.read_text().replace("timeout=abc", "timeout=2.5"))  # a number is fine
    assert farm("jobs", "--config", str(toy)).returncode == 0


def test_jobs_given_a_cell_says_it_takes_a_kernel_name(toy: Path) -> None:
    done = farm("jobs", "toy:plain", "--config", str(toy))
    assert done.returncode == 3, done.stderr
    assert "takes kernel names" in done.stderr and "farm jobs toy" in done.stderr, done.stderr
    done = farm("jobs", "nope", "--config", str(toy))
    assert done.returncode == 3 and "no job for kernel 'nope'; kernels: toy" in done.stderr, done.stderr


# ------------------------------------------------------------ 4. the JSON export's figures


def test_the_json_export_carries_each_cells_figures_and_their_verdict(speedy: Path) -> None:  # noqa: F811 - the fixture
    """A perf-regression exported as JSON said its outcome and reason, but no value, unit or
    median: a CI step charting speed, or checking which metric regressed, had to parse prose."""
    for figure in ("100", "101", "99", "100", "102", "50"):
        night(speedy, figure)
    done = farm("report", "--format", "json", "--config", str(speedy))
    (cell,) = json.loads(done.stdout)["cells"]
    assert cell["outcome"] == "perf-regression"
    (gflops,) = cell["metrics"]
    assert {k: gflops[k] for k in ("name", "value", "unit", "better", "tolerance", "baseline", "regressed")} == {
        "name": "gflops",
        "value": 50.0,
        "unit": "GFLOP/s",
        "better": "higher",
        "tolerance": 0.1,
        "baseline": 100.0,
        "regressed": True,
    }
    assert "50 % worse than the median 100" in gflops["verdict"], gflops
