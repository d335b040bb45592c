"""Where the farm process's CPU goes in a cold fleet run: each function's own thread's CPU
(time.thread_time around it; a nested call counts in its caller too), beside the process's
whole CPU per cell. A diagnostic beside bench/fleet.py (the same fleet: N real sshd nodes,
K = 6 jobs of build 0.5 s and runs of 1.0 s), not a benchmark: no ratio, no target.

    PYTHONPATH=. python3 bench/cpu_attribution.py --nodes 8 --reps 2

What no wrapped function holds (paramiko's transport threads reading and decrypting, the
resident runners' reader threads, the main thread's waits) is the process's CPU minus the
top-level rows: _node (a node's start, in its own thread), _cell (each cell, in a worker
thread), the store's opening and the run's begin, the node's records (a background thread).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

import fleet  # noqa: E402
from nodes import CARDS, Fleet  # noqa: E402

from orchestrator.run import node_setup, resident, scheduler, stages, staging  # noqa: E402
from orchestrator.store import database  # noqa: E402
from orchestrator.transport import ssh  # noqa: E402

SPENT: defaultdict[str, float] = defaultdict(float)
CALLS: Counter[str] = Counter()
WRAPPED: list[tuple[Any, str]] = [
    (ssh.SSHTransport, "_connect"),
    (node_setup, "resident_probe"),
    (staging, "stage"),
    (scheduler.FarmRun, "_node"),
    (scheduler.FarmRun, "_store_snapshot"),
    (scheduler.FarmRun, "_attempt"),
    (scheduler.FarmRun, "_begin"),
    (scheduler.FarmRun, "_cell"),
    (scheduler.FarmRun, "_finish"),
    (stages.CellPipeline, "_send_together"),
    (stages.CellPipeline, "_ran"),
    (resident.ResidentRunner, "run"),
    (resident.ResidentRunner, "_running"),
    (database.Store, "__init__"),
    (database.Store, "add_result"),
    (database.Store, "recorded_binaries"),
]


def wrap(owner: Any, name: str) -> None:
    original = getattr(owner, name)
    label = f"{getattr(owner, '__name__', owner)}.{name}"

    @functools.wraps(original)
    def timed(*args, **kwargs):
        clock = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[label] += time.thread_time() - clock
            CALLS[label] += 1

    setattr(owner, name, timed)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2, help="runs, one after another; the table is the last one's")
    args = ap.parse_args()
    for owner, name in WRAPPED:
        wrap(owner, name)
    tmp = Path(tempfile.mkdtemp(prefix="cpu-attribution-"))
    nodes = Fleet(tmp / "nodes")
    cells = args.nodes * 6
    try:
        for i in range(args.nodes):
            nodes.add(f"n{i:02d}", CARDS["t4"], start=False).start()
        members = list(nodes.nodes.values())
        for rep in range(args.reps):
            SPENT.clear()
            CALLS.clear()
            root = tmp / f"farm{rep}"
            farm_file = fleet.write_farm(root, members, 6, f"sleep 0.5 && {fleet.kernel_build()}", "{binary} 1.0", 2)
            clock, cpu = time.monotonic(), time.process_time()
            summary = fleet.farm_run(farm_file, root / "archives")
            cpu = time.process_time() - cpu
            if summary.outcomes.get("pass", 0) != cells:
                print(f"rep {rep}: NOT ALL PASS {dict(summary.outcomes)}")
                return 1
            print(
                f"rep {rep}: wall {time.monotonic() - clock:.3f} s, the process's CPU {cpu * 1000:.0f} ms, "
                f"{cpu * 1000 / cells:.1f} ms per cell"
            )
        for label, spent in sorted(SPENT.items(), key=lambda kv: -kv[1]):
            each = spent * 1000 / CALLS[label]
            print(f"  {spent * 1000:8.1f} ms  {CALLS[label]:5d} calls  {each:6.2f} ms each  {label}")
    finally:
        nodes.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
