"""Where a cold fleet run's time over its critical path goes: the farm's side of each
node's start (connect, the resident runner's start, probe, staging, first cell sent),
the nodes' clocks around each run, and the end. A diagnostic beside bench/fleet.py
(the same fleet: N real sshd nodes, K = 6 jobs of build 0.5 s and runs of 1.0 s), not
a benchmark: it prints times, no ratio against a target.

    PYTHONPATH=. python3 bench/timeline.py --nodes 8 --reps 3 [--delay-ms 50]

The stand-in kernel prints the node's clock as it starts and before it ends (`echo
S$(date ...)`), run as the bench runs it (`{binary} 1.0`), so "between runs" is measured
on the node, from one kernel's end to the next one's start under the GPU's lock; the
farm's side is timed by wrapping its functions in this process. (Before session 25 the run
command printed the clock, `echo S...; sleep 1.0 && {binary}; echo E...`: a run that starts
other programs, which pays the runner-started path the bench's runs do not.)
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

import fleet  # noqa: E402
from nodes import CARDS, Fleet  # noqa: E402

from orchestrator.run import node_setup, resident, scheduler, staging  # noqa: E402
from orchestrator.store import database  # noqa: E402
from orchestrator.transport import ssh  # noqa: E402

EVENTS: list[tuple[float, str, str]] = []
# every process's events, one line each (O_APPEND, one write): the farm's worker processes (forked
# with these wrappers in place) note theirs here too, on the same CLOCK_MONOTONIC
EVENTS_FD = -1


def note(at: float, step: str, node: str) -> None:
    os.write(EVENTS_FD, f"{at!r}\t{step}\t{node}\n".encode())


def collect() -> None:
    """EVENTS from the file, this process's and its workers'; the file emptied for the next rep."""
    EVENTS.clear()
    os.lseek(EVENTS_FD, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(EVENTS_FD, 1 << 20):
        data += chunk
    for line in data.decode().splitlines():
        at, step, node = line.split("\t")
        EVENTS.append((float(at), step, node))
    os.ftruncate(EVENTS_FD, 0)


CLOCKED_KERNEL = f'#!/bin/sh\necho S$(date +%s.%N)\nsleep "$1"\necho E$(date +%s.%N)\necho "{fleet.PASS}"\n'


def timed(owner: Any, name: str, step: str, node_of=lambda args: "") -> None:
    """Note when OWNER.NAME is called ("step>") and returns ("step"), per node."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        note(time.monotonic(), step + ">", node_of(args))
        try:
            return original(*args, **kwargs)
        finally:
            note(time.monotonic(), step, node_of(args))

    setattr(owner, name, wrapper)


def instrument() -> None:
    timed(ssh.SSHTransport, "_connect", "connect", lambda a: a[0].name)
    timed(resident.ResidentRunner, "_running", "runner start", lambda a: a[0].name)
    timed(node_setup, "resident_probe", "probe", lambda a: a[0].name)
    timed(staging, "stage", "staging", lambda a: a[0].name)
    timed(scheduler.FarmRun, "_begin", "run stored")
    timed(scheduler.FarmRun, "_cells", "cells", lambda a: a[1])
    timed(database.Store, "finish_run", "run finished")
    first_sent: set[str] = set()
    original = resident.ResidentRunner.run

    def run(self, plan, cell, deadline, sink):
        if cell and self.name not in first_sent:
            first_sent.add(self.name)
            note(time.monotonic(), "first cell sent", self.name)
        return original(self, plan, cell, deadline, sink)

    resident.ResidentRunner.run = run
    instrument.first_sent = first_sent  # type: ignore[attr-defined]


def node_clocks(db: Path, run_id: int) -> tuple[list[float], list[float]]:
    """(ms between one run's end and the next's start on each node, ms of each run over its 1.0 s)."""
    by_node: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select node, stdout from results where run_id = ?", (run_id,)).fetchall()
    for node, stdout in rows:
        text = bytes(stdout).decode("utf-8", "replace")
        start = re.search(r"^S(\d+\.\d+)$", text, re.MULTILINE)
        end = re.search(r"^E(\d+\.\d+)$", text, re.MULTILINE)
        if start and end:
            by_node[node].append((float(start.group(1)), float(end.group(1))))
    gaps, inside = [], []
    for spans in by_node.values():
        spans.sort()
        gaps += [(b[0] - a[1]) * 1000 for a, b in itertools.pairwise(spans)]
        inside += [(e - s - 1.0) * 1000 for s, e in spans]
    return gaps, inside


def spread(values: list[float]) -> str:
    values = sorted(values)
    return f"median {statistics.median(values):6.1f}  p90 {values[int(len(values) * 0.9)]:6.1f}  max {values[-1]:6.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="round-trip delay (bench/delay_proxy.py)")
    ap.add_argument("--processes", default="auto", help="farm.yaml's processes (worker processes for the nodes)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="timeline-"))
    global EVENTS_FD
    EVENTS_FD = os.open(tmp / "events", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    instrument()
    nodes = Fleet(tmp / "nodes")
    code = 0
    try:
        for i in range(args.nodes):
            nodes.add(f"n{i:02d}", CARDS["t4"], start=False).start()
        members = list(nodes.nodes.values())
        # the kernel prints the node's clock as it starts and ends: the bench's own run (`{binary}
        # 1.0`, the kernel's commands alone, no trampoline), not a run that starts other programs
        fleet.KERNEL_SCRIPT = CLOCKED_KERNEL
        run = "{binary} 1.0"
        for rep in range(args.reps):
            collect()
            instrument.first_sent.clear()  # type: ignore[attr-defined]
            proxy, ports = fleet.start_delay_proxy(members, args.delay_ms) if args.delay_ms else (None, None)
            try:
                root = tmp / f"farm{rep}"
                farm_file = fleet.write_farm(
                    root,
                    members,
                    6,
                    f"sleep 0.5 && {fleet.kernel_build()}",
                    run,
                    2,
                    ports=ports,
                    processes=args.processes,
                )
                clock = time.monotonic()
                summary = fleet.farm_run(farm_file, root / "archives")
                wall = time.monotonic() - clock
            finally:
                if proxy is not None:
                    proxy.terminate()
                    proxy.wait()
            collect()
            cells = args.nodes * 6
            if summary.outcomes.get("pass", 0) != cells:
                print(f"rep {rep}: NOT ALL PASS {dict(summary.outcomes)}")
                code = 1
                continue
            print(f"rep {rep}: wall {wall:.3f} s over a critical path of 6.5 s: +{wall - 6.5:.3f} s")
            steps: dict[str, list[float]] = defaultdict(list)
            seen: set[tuple[str, str]] = set()
            for at, step, node in sorted(EVENTS):
                if (step, node) not in seen:
                    seen.add((step, node))
                    steps[step].append((at - clock) * 1000)
            for step, values in sorted(steps.items(), key=lambda kv: statistics.median(kv[1])):
                print(f"  {step:16s} at ms ({len(values):3d}): {spread(values)}")
            gaps, inside = node_clocks(root / "results.db", summary.run_id)
            print(f"  on the nodes, ms between one run's end and the next's start: {spread(gaps)}")
            print(f"  on the nodes, ms of each run over its 1.0 s:                  {spread(inside)}")
    finally:
        nodes.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
