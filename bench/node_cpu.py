#!/usr/bin/env python3
"""Benchmark (not a test): what a cell costs the node's CPU, and what a node's setup does.

One real sshd on loopback (tests/nodes.py, an empty HOME), the farm run against
it with 1 cell and with 31 (build `sleep 0.01 && cp /bin/true`, run `sleep 0.01
&& the binary`), twice each, alternating. Everything the node did for a run
(sshd's session processes, the shells, the node runner, the jobs) is reaped
into the listening sshd when the run's connection closes, so its children's CPU
(utime + stime of the reaped, /proc/PID/stat) before and after a run is the
node's CPU for that run. Prints the node's CPU per further cell (the 31-cell
run's less the 1-cell run's, over 30) and the 1-cell run's (the node's setup:
connect, probe, staging, plus one cell); min of two each. A run whose cells
did not all pass prints nothing and exits 1.

    PYTHONPATH=. python3 bench/node_cpu.py [--runner auto|shell]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", default="auto", choices=["auto", "shell"])
    args = ap.parse_args()
    os.environ["FARM_TEST_RUNNER"] = args.runner
    root = Path(tempfile.mkdtemp(prefix="farm-node-cpu-"))
    nodes = Fleet(root / "nodes")
    node = nodes.add("n0", CARDS["t4"], start=False)
    (node.root / "home").mkdir()
    node.config.write_text(node.config.read_text().replace("SetEnv PATH=", f"SetEnv HOME={node.root / 'home'} PATH="))
    node.start()
    assert node.proc is not None
    spent: dict[int, list[float]] = {1: [], 31: []}
    try:
        for round_ in range(2):
            for cells in (1, 31):
                farm_file = fleet.write_farm(
                    root / f"farm-{cells}-{round_}",
                    [node],
                    cells,
                    "sleep 0.01 && cp /bin/true {binary}",
                    f"sleep 0.01 && {{binary}} && echo '{fleet.PASS}'",
                    2,
                )
                before = reaped_cpu(node.proc.pid)
                summary = fleet.farm_run(farm_file, root / "cache")
                time.sleep(0.3)  # the connection's sshd is reaped once it has closed
                spent[cells].append(reaped_cpu(node.proc.pid) - before)
                if dict(summary.outcomes) != {"pass": cells}:
                    print(f"NOT ALL PASS ({dict(summary.outcomes)}); no figure")
                    return 1
    finally:
        nodes.stop()
    per_cell = (min(spent[31]) - min(spent[1])) / 30
    print(
        f"runner {args.runner}: node CPU per further cell {per_cell * 1000:.1f} ms; "
        f"a 1-cell run (setup + 1 cell) {min(spent[1]) * 1000:.0f} ms; all runs {spent}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
