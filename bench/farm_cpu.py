"""The farm's own CPU per cell, side by side for two trees, on any machine (issue 11).

bench/fleet.py measures the farm against a critical path, which needs many cores
to mean anything; this one needs two. It starts a small fleet of real sshd nodes
once (tests/nodes.py, as fleet.py does), then runs the same cold farm (N nodes x
K sleep-free cells: the build copies /bin/true, the run prints PASS) in a child
process per tree, alternating the trees R times, and prints the CPU of that
child (itself and its reaped children) per cell, and the messages the nodes'
resident runners sent per cell where the tree has them.

    PYTHONPATH=. python3 bench/farm_cpu.py                      # this tree alone
    PYTHONPATH=. python3 bench/farm_cpu.py --trees /tmp/old .   # old against this tree
    PYTHONPATH=. python3 bench/farm_cpu.py --profile 30         # the 30 costliest functions, this tree
    PYTHONPATH=. python3 bench/farm_cpu.py --split 1,24         # a node's CPU once, and a cell's, fitted
    PYTHONPATH=. python3 bench/farm_cpu.py --time orchestrator.store.recording:Recording.add_result  # its CPU a cell

An old tree is `git archive COMMIT orchestrator tests | tar -x -C /tmp/old`.
A run whose cells did not all pass prints no figure, and the bench exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import cProfile, json, os, pstats, resource, sys, time
tree, farm_file, cache, profile = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path[:0] = [tree, os.path.join(tree, "tests")]
from orchestrator.config.farm import load_farm
from orchestrator.plan import plan_cells
from orchestrator.run import resident
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store
from orchestrator.transport import ssh  # noqa: F401 - imported before the clock, as the CLI has it

messages = [0, 0]  # count, bytes
kinds = {}
put = getattr(resident, "_put", None)
if put is not None:
    def counted(served, item):
        messages[0] += 1
        kinds[item[0]] = kinds.get(item[0], 0) + 1
        messages[1] += len(item[1]) if isinstance(item[1], bytes) else 0
        return put(served, item)
    resident._put = counted
# each thread's own CPU as it ends, by its kind (its name without numbers, as the farm names them):
# where the CPU goes without a profiler's per-call cost, which inflates generator-heavy code 4x
import re as _re, threading as _threading
by_thread = {}
# --time module:Class.method,...: each one's own thread CPU (outermost calls), summed over the run
timed = {}
def _timed(spec):
    import importlib
    mod, _, attr = spec.partition(":")
    owner = importlib.import_module(mod)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    fn, depth = getattr(owner, name), _threading.local()
    def wrapped(*a, **k):
        outer = not getattr(depth, "n", 0)
        depth.n = getattr(depth, "n", 0) + 1
        t = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            depth.n -= 1
            if outer:
                seen = timed.setdefault(spec, [0.0, 0])
                seen[0] += time.thread_time() - t
                seen[1] += 1
    setattr(owner, name, wrapped)
for spec in filter(None, os.environ.get("FARM_CPU_TIME", "").split(",")):
    _timed(spec)
_inner = _threading.Thread._bootstrap_inner
def _counted(self):
    try:
        _inner(self)
    finally:
        kind = _re.sub(r"[0-9]+", "#", self.name)
        by_thread[kind] = by_thread.get(kind, 0.0) + time.thread_time()
_threading.Thread._bootstrap_inner = _counted
farm = load_farm(farm_file)
cells = plan_cells(farm, None, None)
store = Store(farm.database_url)
# `farm verify` reads with the ORM before its run starts (Store.abort_unfinished_runs), which configures
# SQLAlchemy's mappers, once per process (~20 ms): so here, or the run's first ORM select would pay it
from sqlalchemy.orm import configure_mappers
configure_mappers()
profiles = []
if profile:
    # cProfile sees one thread: give every thread of the run its own (timed by its own CPU), and add them up
    import threading
    bootstrap = threading.Thread._bootstrap_inner  # under run(), which paramiko's threads override
    def profiled(self):
        own = cProfile.Profile(time.thread_time)
        profiles.append(own)
        own.runcall(bootstrap, self)
    threading.Thread._bootstrap_inner = profiled
    profiles.append(cProfile.Profile(time.thread_time))
own0 = resource.getrusage(resource.RUSAGE_SELF)
cpu0, wall0 = time.process_time(), time.monotonic()
if profiles:
    profiles[0].enable()
summary = run_cells(farm, store, cells, cache_dir=cache, trigger="bench")
if profiles:
    profiles[0].disable()
wall = time.monotonic() - wall0
children = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = time.process_time() - cpu0 + children.ru_utime + children.ru_stime
own = resource.getrusage(resource.RUSAGE_SELF)
# user and system CPU of the farm's process and of its children (worker processes, git): a forked
# worker's copy-on-write faults are system time
split = {"self user": own.ru_utime - own0.ru_utime, "self sys": own.ru_stime - own0.ru_stime,
         "children user": children.ru_utime, "children sys": children.ru_stime}
store.close()
if profiles:
    stats = pstats.Stats(profiles[0], stream=sys.stderr)
    for own in profiles[1:]:
        try:
            stats.add(own)
        except TypeError:  # a thread still running (a daemon): its profile has nothing to add yet
            pass
    if os.environ.get("FARM_CPU_STATS"):  # for pstats' callers view: python3 -m pstats FILE
        stats.dump_stats(os.environ["FARM_CPU_STATS"])
    stats.sort_stats("tottime").print_stats(profile)
    stats.sort_stats("cumulative").print_stats("orchestrator", profile)
    stats.sort_stats("tottime").print_stats("orchestrator", profile)
    # where the CPU went, by package (orchestrator by module): what to cut first
    by = {}
    for (path, _, name), (_, _, tottime, _, _) in stats.stats.items():
        if "/orchestrator/" in path:
            key = "orchestrator/" + path.split("/orchestrator/", 1)[1]
        elif "site-packages/" in path:
            key = path.split("site-packages/", 1)[1].split("/", 1)[0]
        elif path == "~":
            key = "builtins: " + name.split(" of ")[-1].strip("'>}{") if " of " in name else "builtins"
        else:
            key = "stdlib/" + os.path.basename(path)
        by[key] = by.get(key, 0.0) + tottime
    total = sum(by.values())
    print(f"CPU by package, {total:.2f} s profiled over {len(cells)} cells:", file=sys.stderr)
    for key, seconds in sorted(by.items(), key=lambda kv: -kv[1])[:40]:
        print(f"  {seconds * 1000 / len(cells):6.2f} ms/cell {100 * seconds / total:5.1f}%  {key}", file=sys.stderr)
print(json.dumps({
    "cells": len(cells), "cpu": cpu, "wall": wall, "outcomes": dict(summary.outcomes),
    "messages": messages[0] if put is not None else None, "bytes": messages[1], "kinds": kinds, "split": split,
    "threads": by_thread, "timed": timed,
}))
"""


def write_farm(root: Path, nodes: list, jobs: int, runner: str, processes: int = 1) -> Path:
    import yaml

    (root / "jobs").mkdir(parents=True)
    (root / "kernels").mkdir()
    (root / "kernels" / "cpu.txt").write_text('#!/bin/sh\necho "cpu: PASS"\n')  # the build copies it into {binary}
    job = {
        "kernel": "cpu",
        "description": "cells with no sleeps: what is left is the farm and the node's runner",
        "sources": ["kernels/cpu.txt"],
        "pass_marker": "cpu: PASS",
        "refusal_marker": "cpu: REFUSED",
        "timeout": 60,
        "build_timeout": 60,
        "variants": {
            f"j{i:02d}": {
                # the "kernel" (its source) prints its own marker: a run command may not (farm.yaml refuses it)
                "build": "cat {sources} > {binary} && chmod +x {binary}",
                "run": "{binary}",
                "inspect": "cat {binary} > /dev/null",
                "instructions": {},
                "cc": {"min": "7.5"},
            }
            for i in range(jobs)
        },
    }
    (root / "jobs" / "cpu.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    nvcc = shutil.which("nvcc") or "/usr/local/bin/nvcc"
    farm = {
        "database": "sqlite:///results.db",
        "reports": "reports",
        "jobs": "jobs",
        "processes": processes,
        "nodes": {n.name: n.farm_entry(root / f"work-{n.name}", build_jobs=2, nvcc=nvcc, runner=runner) for n in nodes},
    }
    path = root / "farm.yaml"
    path.write_text(yaml.safe_dump(farm, sort_keys=False))
    return path


def one_run(tree: Path, root: Path, nodes: list, jobs: int, runner: str, profile: int, processes: int = 1) -> dict:
    if root.exists():
        shutil.rmtree(root)
    farm_file = write_farm(root, nodes, jobs, runner, processes)
    # the tree goes first on the child's path (CHILD); PYTHONPATH stays for the farm's packages
    env = dict(os.environ, XDG_CACHE_HOME=str(root / "cache"))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(farm_file), str(root / "archives"), str(profile)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if profile:
        print(out.stderr, file=sys.stderr)
    if out.returncode != 0:
        raise RuntimeError(f"{tree}: the farm's child exited {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def split_fixed(tree: Path, tmp: Path, nodes: list, args: argparse.Namespace) -> int:
    """CPU(K) = N x (node + K x cell), for two K side by side: what a node costs once and what a cell adds."""
    k1, k2 = (int(k) for k in args.split.split(","))
    cpu: dict[int, list[float]] = {k1: [], k2: []}
    for _ in range(args.repeat):
        for k in (k1, k2):
            run = one_run(tree, tmp / "farm", nodes, k, args.runner, 0, args.processes)
            if run["outcomes"].get("pass", 0) != run["cells"]:
                print(f"{tree} at {k} cells per node: NOT ALL PASS ({run['outcomes']}); no figure")
                return 1
            cpu[k].append(run["cpu"] / len(nodes) * 1000)  # ms per node
    a, b = statistics.median(cpu[k1]), statistics.median(cpu[k2])
    cell = (b - a) / (k2 - k1)
    node = a - k1 * cell
    print(
        f"{len(nodes)} nodes, {k1} and {k2} cells each, {args.repeat} runs of each, alternating; "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    for k in (k1, k2):
        print(f"{k} cells per node: farm CPU per node {' / '.join(f'{x:.1f}' for x in cpu[k])} ms")
    print(
        f"fitted: each node {node:.1f} ms once, each cell {cell:.2f} ms; at 6 cells per node (bench/fleet.py) "
        f"{node / 6 + cell:.2f} ms a cell, {node / 6 / (node / 6 + cell):.0%} of it the node's"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", nargs="+", default=[str(REPO)], help="farm trees to run side by side")
    ap.add_argument("--nodes", type=int, default=12)
    ap.add_argument("--jobs", type=int, default=24, help="cells (variants) per node")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tree, alternating")
    ap.add_argument("--runner", choices=["auto", "cell", "shell"], default="auto")
    ap.add_argument("--processes", type=int, default=1, help="farm.yaml's worker processes (1: none)")
    ap.add_argument("--profile", type=int, default=0, help="print this many costliest functions (first tree, one run)")
    ap.add_argument(
        "--time",
        default="",
        help="module:Class.method,... (or module:function): each one's thread CPU per cell, last run, "
        "e.g. orchestrator.store.recording:Recording.add_result",
    )
    ap.add_argument(
        "--split",
        default="",
        help="K1,K2: the first tree at K1 and at K2 cells per node, alternated --repeat times; prints the CPU a "
        "node costs once (connect, probe, stage, its records) and the CPU each further cell costs, fitted",
    )
    args = ap.parse_args()
    os.environ["FARM_CPU_TIME"] = args.time  # read by each run's child (CHILD)
    sys.path[:0] = [str(REPO / "tests")]
    from nodes import CARDS, Fleet

    trees = [Path(t).resolve() for t in args.trees]
    tmp = Path(tempfile.mkdtemp(prefix="farm-cpu-"))
    fleet = Fleet(tmp / "nodes")
    failed = False
    try:
        for i in range(args.nodes):
            node = fleet.add(f"c{i:02d}", CARDS["t4"], start=False)
            # its login's HOME is an empty folder of its own (tests/nodes.py): no rc file is measured
            node.start()
        nodes = list(fleet.nodes.values())
        if args.profile:
            one_run(trees[0], tmp / "farm-profile", nodes, args.jobs, args.runner, args.profile, args.processes)
            return 0
        if args.split:
            return split_fixed(trees[0], tmp, nodes, args)
        seen: dict[Path, list[dict]] = {t: [] for t in trees}
        for _ in range(args.repeat):
            for tree in trees:
                seen[tree].append(one_run(tree, tmp / "farm", nodes, args.jobs, args.runner, 0, args.processes))
        print(
            f"{args.nodes} nodes x {args.jobs} cells, runner {args.runner}, {args.repeat} runs of each tree, "
            f"alternating; {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
        )
        for tree, runs in seen.items():
            cells = runs[0]["cells"]
            bad = [r["outcomes"] for r in runs if r["outcomes"].get("pass", 0) != cells]
            if bad:
                print(f"{tree}: NOT ALL PASS ({bad[0]}); no figure")
                failed = True
                continue
            per_cell = [r["cpu"] / cells * 1000 for r in runs]
            messages = [r["messages"] / cells for r in runs if r["messages"] is not None]
            said = ""
            if messages:
                kinds = ", ".join(f"{k} {v / cells:.2f}" for k, v in sorted(runs[-1]["kinds"].items()))
                said = (
                    f", resident messages per cell {statistics.median(messages):.2f} ({kinds}; "
                    f"{runs[-1]['bytes'] / cells:.0f} bytes)"
                )
            parts = "; ".join(
                f"{k} {statistics.median(r['split'][k] for r in runs) / cells * 1000:.1f}"
                for k in runs[0].get("split", {})
            )
            said += f"; per cell, ms: {parts}" if parts else ""
            threads = runs[-1].get("threads") or {}
            if threads and args.processes == 1:  # a worker process's threads are not the child's
                own = sum(threads.values())
                rest = runs[-1]["cpu"] - own  # the run's main thread (cpu counts from its start) and reaped children
                named = {"node_#": "node (connect, probe, stage; its first cell worker)", "Thread-#": "paramiko reader"}
                kinds = sorted(((named.get(k, k), v) for k, v in threads.items()), key=lambda kv: -kv[1])
                said += "; by thread, ms per cell (last run): " + ", ".join(
                    [f"{kind} {sec / cells * 1000:.2f}" for kind, sec in kinds] + [f"main {rest / cells * 1000:.2f}"]
                )
            for spec, (sec, calls) in (runs[-1].get("timed") or {}).items():
                said += f"; {spec}: {sec / cells * 1000:.3f} ms per cell ({calls} calls)"
            print(
                f"{tree}: farm CPU per cell {' / '.join(f'{x:.1f}' for x in per_cell)} ms "
                f"(median {statistics.median(per_cell):.1f}); wall {statistics.median(r['wall'] for r in runs):.2f} s"
                f"{said}"
            )
        if len(trees) == 2 and not failed:
            a = statistics.median(r["cpu"] for r in seen[trees[0]])
            b = statistics.median(r["cpu"] for r in seen[trees[1]])
            print(f"ratio second / first: {b / a:.3f}")
    finally:
        fleet.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
