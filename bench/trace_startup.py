"""Benchmark aid (not a test): where a fleet run's start goes, node by node.

The fleet of bench/fleet.py (real sshd nodes on loopback, sleep-based jobs), one
cold run per size, with the farm's steps timed in every process of the run (the
parent and its worker processes: this module is added to the fork server's
preload, so the workers time theirs too). Prints, per size, when (seconds from
the run's start, median / 90th percentile / max over the nodes) each node's
worker started, its connection was made, its probe and staging ended, its
records were stored, its resident runner was up and its first cell started; and
the wall, to hold against the ratio bench/fleet.py prints.

    PYTHONPATH=. python3 bench/trace_startup.py --sizes 64,256 [--processes auto|N]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

EVENTS: list[tuple[float, str, str]] = []  # (time.time(), step, node)
TRACE_DIR = os.environ.get("FARM_TRACE_DIR", "")


def _timed(owner: object, name: str, step: str, node_of) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        finally:
            EVENTS.append((time.time(), step, node_of(args)))

    setattr(owner, name, timed)


def install() -> None:
    from orchestrator.run import resident, scheduler, staging, workers
    from orchestrator.transport import ssh

    _timed(ssh.SSHTransport, "_connect", "connected", lambda a: a[0].name)
    _timed(scheduler, "probe", "probed", lambda a: a[0].name)
    _timed(staging, "stage", "staged", lambda a: a[0].name)
    _timed(scheduler.FarmRun, "_store_snapshot", "stored", lambda a: a[1])
    _timed(resident.ResidentRunner, "_running", "resident up", lambda a: a[0].name)
    first = scheduler.FarmRun._cell

    def cell(self, transport, one, ctx):
        EVENTS.append((time.time(), "cell started", one.node))
        return first(self, transport, one, ctx)

    scheduler.FarmRun._cell = cell
    if workers.worker_main is not traced_worker_main:
        ORIGINAL.append(workers.worker_main)
        workers.worker_main = traced_worker_main


ORIGINAL: list = []  # the farm's worker_main


def traced_worker_main(*args, **kwargs):  # module level: a worker's target is pickled by name
    EVENTS.append((time.time(), "worker started", str(os.getpid())))
    try:
        return ORIGINAL[0](*args, **kwargs)
    finally:
        dump()


def dump() -> None:
    if TRACE_DIR:  # a worker's (one file each), or the parent's (rewritten per run)
        Path(TRACE_DIR, f"trace-{os.getpid()}.json").write_text(json.dumps(EVENTS))


if TRACE_DIR and __name__ != "__main__":  # imported in the fork server: time the workers' steps too
    install()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64,256")
    ap.add_argument("--processes", default="auto")
    args = ap.parse_args()
    import multiprocessing.context

    import fleet
    from nodes import CARDS, Fleet

    from orchestrator.config.farm import load_farm
    from orchestrator.run import workers

    preload = multiprocessing.context.ForkServerContext.set_forkserver_preload

    def with_trace(self, modules):
        return preload(self, [*modules, "trace_startup"])

    multiprocessing.context.ForkServerContext.set_forkserver_preload = with_trace
    install()
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="farm-trace-"))
    trace_dir = tmp / "trace"  # one for every run: the fork server, started once, keeps its environment
    trace_dir.mkdir()
    os.environ["FARM_TRACE_DIR"] = str(trace_dir)
    global TRACE_DIR
    TRACE_DIR = str(trace_dir)
    nodes = Fleet(tmp / "nodes")
    try:
        for i in range(max(sizes)):
            node = nodes.add(f"n{i:02d}", CARDS["t4"], start=False)
            node.start()
        fleet_nodes = list(nodes.nodes.values())
        for n in sizes:
            EVENTS.clear()
            root = tmp / f"farm-{n}"
            farm_file = fleet.write_farm(
                root,
                fleet_nodes[:n],
                6,
                f"sleep 0.5 && {fleet.kernel_build()}",
                "{binary} 1.0",
                2,
                processes=args.processes,
            )
            start = time.time()
            summary = fleet.farm_run(farm_file, root / "archives")
            end = time.time()
            dump()
            time.sleep(0.5)  # the workers' files
            if dict(summary.outcomes) != {"pass": n * 6}:
                print(f"N={n}: NOT ALL PASS {dict(summary.outcomes)}")
                return 1
            events = [
                e for f in trace_dir.glob("trace-*.json") for e in json.loads(f.read_text()) if start <= e[0] <= end
            ]
            first: dict[tuple[str, str], float] = {}
            for at, step, node in sorted(events):
                first.setdefault((step, node), at - start)
            count = workers.worker_count(load_farm(farm_file), [f"n{i:02d}" for i in range(n)])
            print(
                f"N={n}: wall {summary.wall_seconds:.2f} s (ratio {summary.wall_seconds / 6.5:.3f}); "
                f"{count} worker process(es); seconds from the run's start, median / p90 / max over nodes:"
            )
            steps = ["worker started", "connected", "probed", "staged", "cell started", "resident up", "stored"]
            for step in steps:
                times = sorted(t for (s, node), t in first.items() if s == step)
                if not times:
                    continue
                p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
                print(
                    f"  {step:15s} n={len(times):4d}  {statistics.median(times):6.2f} / {p90:6.2f} / {times[-1]:6.2f}"
                )
    finally:
        nodes.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
