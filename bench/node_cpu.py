#!/usr/bin/env python3
"""Benchmark (not a test): what a cell costs the node's CPU, and what a node's setup does.

One real sshd on loopback (tests/nodes.py, an empty HOME), the farm run against
it with 1 cell and with 61 (build `sleep 0.01` and a script printing PASS, run `sleep 0.01
&& the script`), for each node runner in turn (auto: the node's resident python3,
resident.py; cell: a python3 per cell; shell), three rounds, interleaved.
Everything the node did for a run (sshd's session processes, the shells, the
node runner, the jobs) is reaped into the listening sshd when the run's
connection closes, so its children's CPU (utime + stime of the reaped,
/proc/PID/stat) before and after a run is the node's CPU for that run. Prints
per runner the node's CPU per further cell (the big run's less the 1-cell
run's, over the cells between) and the 1-cell run's (the node's setup:
connect, probe, staging, plus one cell), min of the rounds each; then each
runner's per-cell CPU over the first's. A run whose cells did not all pass
prints nothing and exits 1.

    PYTHONPATH=. python3 bench/node_cpu.py [--runners auto,cell,shell]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

import fleet  # noqa: E402
from nodes import CARDS, Fleet  # noqa: E402


def reaped_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime


def settled(pid: int, limit: float = 20.0) -> None:
    """Until the listening sshd has no child left (the run's connection and what it
    started have ended and been reaped into it), at most `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if not children:
            return
        time.sleep(0.05)
    raise SystemExit(f"sshd {pid} still has children after {limit:.0f} s: no figure")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runners", default="auto,cell", help="node runners measured side by side: auto, cell, shell")
    ap.add_argument("--cells", type=int, default=61, help="cells of the bigger run")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runners = args.runners.split(",")
    if any(r not in ("auto", "cell", "shell") for r in runners):
        ap.error("--runners: auto, cell or shell")
    root = Path(tempfile.mkdtemp(prefix="farm-node-cpu-"))
    nodes = Fleet(root / "nodes")
    node = nodes.add("n0", CARDS["t4"], start=False)
    node.start()
    assert node.proc is not None
    sizes = (1, args.cells)
    spent: dict[str, dict[int, list[float]]] = {r: {n: [] for n in sizes} for r in runners}
    try:
        for round_ in range(args.rounds):
            for runner in runners:  # interleaved: the machine's drift hits each alike
                os.environ["FARM_TEST_RUNNER"] = runner  # tests/nodes.py puts it into the node's entry
                for cells in sizes:
                    farm_file = fleet.write_farm(
                        root / f"farm-{runner}-{cells}-{round_}",
                        [node],
                        cells,
                        f"sleep 0.01 && {fleet.kernel_build()}",
                        "{binary} 0.01",
                        2,
                    )
                    before = reaped_cpu(node.proc.pid)
                    summary = fleet.farm_run(farm_file, root / "cache")
                    settled(node.proc.pid)
                    spent[runner][cells].append(reaped_cpu(node.proc.pid) - before)
                    if dict(summary.outcomes) != {"pass": cells}:
                        print(f"NOT ALL PASS ({runner}: {dict(summary.outcomes)}); no figure")
                        return 1
    finally:
        nodes.stop()
    per_cell = {}
    for runner in runners:
        per_cell[runner] = (min(spent[runner][args.cells]) - min(spent[runner][1])) / (args.cells - 1)
        print(
            f"runner {runner}: node CPU per further cell {per_cell[runner] * 1000:.1f} ms; "
            f"a 1-cell run (setup + 1 cell) {min(spent[runner][1]) * 1000:.0f} ms; "
            f"runs (s) { ({n: [round(x, 2) for x in v] for n, v in spent[runner].items()}) }"
        )
    for runner in runners[1:]:
        print(f"node CPU per cell, {runner} / {runners[0]}: {per_cell[runner] / per_cell[runners[0]]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
