"""What of the node probe's time a build started beside it could save (issue 11), on one machine.

The resident runner's probe (orchestrator/run/node/probe.py) starts nvidia-smi, `nvcc --version`,
nvcc's dry run and `cuobjdump --version` side by side and asks NVML from a thread. A build needs
only the toolchain's answers (the build key: nvcc's lines, the compilers' files); the GPU's part
(nvidia-smi, NVML) it does not. This starts K probes' programs at once, as K nodes of one host
start them at a run's start (bench/fleet.py's nodes), and prints for each K the seconds after the
start at which each probe's toolchain part and its GPU part had answered: the GPU part's lead
over the toolchain's is the most that building beside the probe could take off a node's start.

    python3 bench/probe_parts.py --counts 1,8,64 --repeat 3

nvcc is found on PATH, else in /usr/local/cuda/bin; the NVML query is the probe's own. Where a
program of a probe does not exit 0 (no GPU, no nvcc), the bench prints no figure and exits 1.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

# the probe's own questions, read from the farm's source (no import: the GPU machine lacks its packages)
_SOURCE = ast.parse((Path(__file__).resolve().parent.parent / "orchestrator/run/driver_check.py").read_text())
_CONSTANTS = {
    node.targets[0].id: ast.literal_eval(node.value)
    for node in _SOURCE.body
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.endswith("_QUERY")
}
GPU_QUERY, NVML_QUERY = _CONSTANTS["GPU_QUERY"], _CONSTANTS["NVML_QUERY"]

NVML_CHILD = "import sys\nnames = {}\nexec(sys.stdin.read(), names)\nnames['query']()\n"


def tool(name: str) -> str:
    cuda = f"/usr/local/cuda/bin/{name}"
    found = shutil.which(name) or (cuda if os.path.exists(cuda) else "")
    if not found:
        raise SystemExit(f"probe_parts: no {name} on PATH or in /usr/local/cuda/bin")
    return found


def one_probe(nvcc: str, cuobjdump: str, start: float, out: list[tuple[float, float, bool]]) -> None:
    """One node's probe programs, started at once: when its toolchain part and its GPU part ended."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    toolchain = [
        subprocess.Popen([nvcc, "--version"], **quiet),
        subprocess.Popen([nvcc, "-dryrun", "-x", "cu", "-E", "/dev/null"], **quiet),
        subprocess.Popen([cuobjdump, "--version"], **quiet),
    ]
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader"], **quiet)
    nvml = subprocess.Popen([sys.executable, "-I", "-S", "-c", NVML_CHILD], stdin=subprocess.PIPE, **quiet)
    assert nvml.stdin is not None
    nvml.stdin.write(NVML_QUERY.encode())  # a few KB: within the pipe's buffer, no wait
    nvml.stdin.close()
    ok = all(p.wait() == 0 for p in toolchain)
    tool_end = time.monotonic() - start
    ok = smi.wait() == 0 and nvml.wait() == 0 and ok
    gpu_end = time.monotonic() - start
    out.append((tool_end, gpu_end, ok))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,8,64", help="probes started at once, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    nvcc, cuobjdump = tool("nvcc"), tool("cuobjdump")
    tool("nvidia-smi")
    print(f"nvcc {nvcc}; {os.cpu_count()} cores")
    failed = False
    for count in (int(c) for c in args.counts.split(",")):
        tools: list[float] = []
        gpus: list[float] = []
        leads: list[float] = []
        for _ in range(args.repeat):
            out: list[tuple[float, float, bool]] = []
            start = time.monotonic()
            threads = [threading.Thread(target=one_probe, args=(nvcc, cuobjdump, start, out)) for _ in range(count)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if len(out) < count or not all(ok for *_, ok in out):
                failed = True
            tools += [t for t, _, _ in out]
            gpus += [g for _, g, _ in out]
            leads += [max(g - t, 0.0) for t, g, _ in out]
        if failed or not tools:
            failed = True
            print(f"K={count}: a probe program did not exit 0: no figure")
            continue
        print(
            f"K={count}: toolchain answered median {statistics.median(tools) * 1000:.0f} ms "
            f"(p90 {percentile(tools, 0.9) * 1000:.0f}); GPU part median {statistics.median(gpus) * 1000:.0f} ms "
            f"(p90 {percentile(gpus, 0.9) * 1000:.0f}); GPU part after the toolchain's: median "
            f"{statistics.median(leads) * 1000:.0f} ms, p90 {percentile(leads, 0.9) * 1000:.0f} ms"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
