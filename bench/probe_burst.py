#!/usr/bin/env python3
"""Benchmark aid (not a test): what a fleet's start burst costs the machine, part by part.

At a fleet run's start every node runs its probe at once; on the bench's one
machine (bench/fleet.py: every node an sshd on loopback) they share its cores
and, on a GPU machine, its one driver. This starts K copies at once of each
part of the probe, for each K of --sizes, and prints the burst's wall and the
CPU per copy (the reaped children's), side by side in one run:

    pass     `python3 -I -S -c pass`: an interpreter's start
    nvml     the probe's driver query (orchestrator/run/driver_check.py NVML_QUERY) in a fresh python3
    python   the probe's whole python3 (driver query and the runner's compile)
    probe    the probe's whole shell command (a T4 nvidia-smi stand-in first on PATH)

A copy that fails (a non-zero exit) prints no figure for its part.

    PYTHONPATH=. python3 bench/probe_burst.py [--sizes 1,16,64,256] [--parts pass,nvml,probe]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from nodes import CARDS, nvidia_smi_script  # noqa: E402

from orchestrator.config.farm_spec import NodeSpec  # noqa: E402
from orchestrator.run import driver_check, probe  # noqa: E402


def commands(workdir: Path) -> dict[str, str]:
    nvcc = shutil.which("nvcc") or "/usr/local/bin/nvcc"
    node = NodeSpec.model_validate({"host": "localhost", "workdir": str(workdir), "nvcc": nvcc})
    driver = driver_check.NVML_QUERY + driver_check.QUERY_PRINT
    return {
        "pass": "python3 -I -S -c pass",
        "nvml": f"python3 -I -S -c {shlex.quote(driver)}",
        "python": f"python3 -I -S -c {shlex.quote(probe.probe_python(True))} ''",
        "probe": probe.probe_command(node),
    }


def burst(command: str, copies: int, env: dict[str, str]) -> tuple[float, float, int]:
    """(wall, CPU seconds per copy, failures) of `copies` copies started at once."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    procs = [
        subprocess.Popen(["bash", "-c", command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(copies)
    ]
    failed = sum(1 for p in procs if p.wait() != 0)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu / copies, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,16,64,256")
    ap.add_argument("--parts", default="pass,nvml,python,probe")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="farm-burst-"))
    (root / "bin").mkdir()
    smi = root / "bin" / "nvidia-smi"
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{root / 'bin'}:{os.environ['PATH']}")
    parts = commands(root / "work")
    chosen = args.parts.split(",")
    control = os.path.exists("/dev/nvidiactl")
    print(f"{os.cpu_count()} CPUs; python3 = {shutil.which('python3')}; /dev/nvidiactl: {control}")
    status = 0
    for size in (int(s) for s in args.sizes.split(",")):
        for part in chosen:
            runs = [burst(parts[part], size, env) for _ in range(args.rounds)]
            if any(failed for _, _, failed in runs):
                print(f"K={size:4d} {part:7s} FAILED ({[f for _, _, f in runs]} copies of {size} failed): no figure")
                status = 1
                continue
            walls = sorted(w for w, _, _ in runs)
            cpus = sorted(c for _, c, _ in runs)
            print(
                f"K={size:4d} {part:7s} wall min {walls[0]:6.3f} s median {walls[len(walls) // 2]:6.3f} s; "
                f"CPU per copy min {cpus[0] * 1000:6.1f} ms median {cpus[len(cpus) // 2] * 1000:6.1f} ms"
            )
    return status


if __name__ == "__main__":
    sys.exit(main())
