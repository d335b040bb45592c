"""The farm's CPU per stored cell result: Store.add_result against a floor.

Side by side in one run, each into its own real SQLite file (WAL, as the farm
opens it): the farm's `Store.add_result` with the run's journal on (a JSON
record appended and fsync'd, then one transaction: the result, its metric
value, its three SASS counts and its attempt), and a floor: the same rows
written by plain SQLAlchemy Core (one insert for the result, executemany for
the rest) in one transaction per result, with no journal, lock or checks.
The two alternate in rounds; each prints the median over rounds of the
process's CPU (user + system) per result, then the ratio. A write that
fails, or two databases that do not hold the same rows, prints no ratio and
exits 1.

    PYTHONPATH=. python3 bench/store_write.py [--results 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from orchestrator.store.database import Store  # noqa: E402
from orchestrator.store.journal import Journal, journal_folder  # noqa: E402
from orchestrator.store.records import AttemptRecord, ResultRecord, SnapshotRecord  # noqa: E402
from orchestrator.store.tables import Attempt, MetricValue, ResultRow, SassCount  # noqa: E402

RUN = {"trigger": "bench", "farm_version": "bench", "host": "here", "config_file": "farm.yaml", "selection": "--all"}
STDOUT = b"gemm: 4096x4096 in 1.02 ms\nGFLOP/s: 134.7\ngemm: PASS\n" + bytes(range(256)) * 4  # ~1 KiB, not UTF-8


def cell_record(run_id: int, snapshot_id: int, i: int) -> ResultRecord:
    """A passing cell's result as orchestrator/store/records.py result_record makes it."""
    now = datetime.now(UTC)
    return ResultRecord(
        run_id=run_id,
        snapshot_id=snapshot_id,
        kernel="gemm",
        variant=f"v{i}",
        node="h100",
        device="NVIDIA H100 80GB HBM3",
        gpu_index=i % 8,
        gpu_uuid=f"GPU-{i % 8:08d}",
        cc="9.0",
        real_gpu=True,
        contract="cc>=8.0",
        contract_ccs=["8.0", "9.0"],
        expected="pass",
        contract_expected="pass",
        expected_reason="the contract serves this card",
        known_failure_reason=None,
        outcome="pass",
        failed_stage=None,
        reason="printed its pass marker",
        exit_code=0,
        stage_seconds={"build": 2.5, "inspect": 0.2, "run": 1.1},
        stage_details={s: {"status": "ok", "detail": ""} for s in ("probe", "stage", "build", "inspect", "run")},
        build_key="0123456789abcdef0123",
        build_command=f"nvcc -O3 -arch=sm_90a -o bin/v{i} kernels/gemm.cu",
        build_cached=i % 2 == 0,
        build_log=b"ptxas info: Used 128 registers\n" * 4,
        stdout=STDOUT,
        stderr=b"",
        stdout_size=len(STDOUT),
        stderr_size=0,
        stdout_sha256="5" * 64,
        stderr_sha256=None,
        output_cuts={},
        markers={"pass": 3, "refusal": None},
        last_stderr_line=None,
        source_sha256="0" * 64,
        sources={"kernels/gemm.cu": "0" * 64, "kernels/tile.cuh": "1" * 64},
        dependencies={"cutlass": {"digest": "2" * 64, "version": "3.5.1", "origin": "git"}},
        identity="3" * 64,
        binary_sha256="4" * 64,
        instruction_counts={"HGMMA": 48, "LDGSTS": 16, "BAR": 6},
        required_instructions={"HGMMA": 1},
        elf_targets=["sm_90a"],
        ptx_targets=[],
        code_path="sass",
        slurm_job_id=None,
        compute_node=None,
        sanitizer=None,
        started_at=now,
        ended_at=now,
    )


def metric_values(i: int) -> list[dict[str, Any]]:
    return [
        {
            "name": "gflops",
            "value": 134.7 + i % 3,
            "unit": "GFLOP/s",
            "better": "higher",
            "tolerance": 0.1,
            "note": "read from stdout",
            "baseline": 134.0,
            "regressed": False,
        }
    ]


def attempts(run_id: int, i: int) -> list[AttemptRecord]:
    return [AttemptRecord(run_id=run_id, node="h100", kernel="gemm", variant=f"v{i}", attempt=1, status="ok")]


def opened(root: Path, name: str) -> tuple[Store, int, int]:
    """A store (the farm's schema and pragmas) with a run and a node snapshot."""
    store = Store(f"sqlite:///{root / name}")
    run_id = store.begin_run(token=name.split(".")[0], **RUN)
    snapshot_id = store.add_snapshot(
        SnapshotRecord(run_id=run_id, node="h100", transport="ssh", address="farm@h100:22")
    )
    return store, run_id, snapshot_id


def floor_write(store: Store, run_id: int, snapshot_id: int, i: int) -> int:
    """The same rows as add_result, by plain Core in one transaction, no journal."""
    fields = cell_record(run_id, snapshot_id, i).columns()
    at = datetime.now(UTC)
    key = {k: fields[k] for k in ("run_id", "kernel", "variant", "node", "device")}
    with store.engine.begin() as connection:
        result_id = connection.execute(ResultRow.__table__.insert(), fields).inserted_primary_key[0]
        connection.execute(
            MetricValue.__table__.insert(), [{"result_id": result_id, **key, **m} for m in metric_values(i)]
        )
        connection.execute(
            SassCount.__table__.insert(),
            [
                {"result_id": result_id, "identity": fields["identity"], "instruction": name, "count": count}
                for name, count in fields["instruction_counts"].items()
            ],
        )
        connection.execute(Attempt.__table__.insert(), [{**a.columns(), "at": at} for a in attempts(run_id, i)])
    return result_id


def rows(store: Store) -> list[tuple]:
    """What both databases must hold alike: every written table, less ids and times."""
    found: list[tuple] = []
    with store.engine.connect() as connection:
        for table, left_out in (
            (ResultRow, {"id", "started_at", "ended_at"}),
            (MetricValue, {"id"}),
            (SassCount, {"id"}),
            (Attempt, {"id", "at"}),
        ):
            columns = [c for c in table.__table__.columns if c.key not in left_out]
            found += [(table.__tablename__, *row) for row in connection.execute(select(*columns).order_by(table.id))]
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=int, default=300, help="results per round, for each contender")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="farm-store-bench-"))
    farm, farm_run, farm_snapshot = opened(root, "farm.db")
    farm.journal = Journal(journal_folder(farm.url, root), "farm")
    floor, floor_run, floor_snapshot = opened(root, "floor.db")
    counter = {"farm": 0, "floor": 0}

    def farm_write(i: int) -> int:
        return farm.add_result(cell_record(farm_run, farm_snapshot, i), attempts(farm_run, i), metric_values(i))

    contenders: dict[str, Callable[[int], int]] = {
        "farm Store.add_result (journal on)": farm_write,
        "floor: plain Core executemany, no journal": lambda i: floor_write(floor, floor_run, floor_snapshot, i),
    }
    per_result: dict[str, list[float]] = {name: [] for name in contenders}
    failed: list[str] = []
    for round_ in range(args.rounds + 1):  # round 0 warms up (compiled statements, pages)
        for (name, write), key in zip(contenders.items(), counter, strict=True):
            clock = time.process_time()
            for _ in range(args.results):
                try:
                    write(counter[key])
                except Exception as err:  # any failure: no ratio
                    failed.append(f"{name}: {type(err).__name__}: {err}")
                counter[key] += 1
            if round_:
                per_result[name].append((time.process_time() - clock) / args.results)
    farm.close()
    same = rows(farm) == rows(floor)
    floor.close()
    shutil.rmtree(root)
    for name, seconds in per_result.items():
        print(f"{name}: {statistics.median(seconds) * 1e6:.0f} us CPU per result ({args.rounds} rounds)")
    if failed or not same:
        print(f"{len(failed)} writes failed" + ("" if same else "; the two databases differ") + "; no ratio")
        for line in failed[:3]:
            print(line)
        return 1
    (farm_us, floor_us) = (statistics.median(seconds) for seconds in per_result.values())
    print(
        f"farm / floor: {farm_us / floor_us:.2f} ({args.results} results per round, {args.results * (args.rounds + 1)}"
        f" each; the same rows in both databases)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
