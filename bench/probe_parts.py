"""What of the node probe's time a build started beside it could save (issue 11), on one machine.

The resident runner's probe (orchestrator/run/node/probe.py) starts nvidia-smi, `nvcc --version`,
nvcc's dry run and `cuobjdump --version` side by side and asks NVML from a thread. A build needs
only the toolchain's answers (the build key: nvcc's lines, the compilers' files); the GPU's part
(nvidia-smi, NVML) it does not. This starts K probes' programs at once, as K nodes of one host
start them at a run's start (bench/fleet.py's nodes), and prints for each K the seconds after the
start at which each probe's toolchain part and its GPU part had answered: the GPU part's lead
over the toolchain's is the most that building beside the probe could take off a node's start.

    python3 bench/probe_parts.py --counts 1,8,64 --repeat 3
    python3 bench/probe_parts.py --counts 1,32,64 --repeat 3 --queries gpu,probe

`--queries gpu,probe` runs the GPU part with each nvidia-smi query (driver_check.py's GPU_QUERY, six
fields, and PROBE_QUERY, the same and the ECC count: the probe's since round 155), the two taking
turns within each repeat, and prints the ratio of their GPU parts' medians: whether the ECC field
costs a node's start anything (a fleet bench at 8a61990 found node starts slower from N=32).

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
_CONSTANTS: dict[str, str] = {}
for node in _SOURCE.body:  # literals, or sums of the ones before (PROBE_QUERY = GPU_QUERY + "...")
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.endswith("_QUERY"):
        expression = ast.Expression(node.value)
        _CONSTANTS[node.targets[0].id] = eval(compile(expression, "driver_check.py", "eval"), {}, dict(_CONSTANTS))
GPU_QUERY, NVML_QUERY = _CONSTANTS["GPU_QUERY"], _CONSTANTS["NVML_QUERY"]
QUERIES = {"gpu": GPU_QUERY, "probe": _CONSTANTS["PROBE_QUERY"]}

NVML_CHILD = "import sys\nnames = {}\nexec(sys.stdin.read(), names)\nnames['query']()\n"


def tool(name: str) -> str:
    cuda = f"/usr/local/cuda/bin/{name}"
    found = shutil.which(name) or (cuda if os.path.exists(cuda) else "")
    if not found:
        raise SystemExit(f"probe_parts: no {name} on PATH or in /usr/local/cuda/bin")
    return found


def one_probe(
    nvcc: str, cuobjdump: str, start: float, out: list[tuple[float, float, bool]], query: str = GPU_QUERY
) -> None:
    """One node's probe programs, started at once: when its toolchain part and its GPU part ended."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    toolchain = [
        subprocess.Popen([nvcc, "--version"], **quiet),
        subprocess.Popen([nvcc, "-dryrun", "-x", "cu", "-E", "/dev/null"], **quiet),
        subprocess.Popen([cuobjdump, "--version"], **quiet),
    ]
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], **quiet)
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
    ap.add_argument("--queries", default="gpu", help="nvidia-smi queries taking turns: gpu, probe or gpu,probe")
    args = ap.parse_args()
    queries = args.queries.split(",")
    if unknown := [q for q in queries if q not in QUERIES]:
        raise SystemExit(f"probe_parts: --queries: {', '.join(unknown)}: expected gpu, probe or both")
    nvcc, cuobjdump = tool("nvcc"), tool("cuobjdump")
    tool("nvidia-smi")
    print(f"nvcc {nvcc}; {os.cpu_count()} cores; queries {', '.join(f'{q}={QUERIES[q]}' for q in queries)}")
    failed = False
    for count in (int(c) for c in args.counts.split(",")):
        tools: dict[str, list[float]] = {q: [] for q in queries}
        gpus: dict[str, list[float]] = {q: [] for q in queries}
        leads: dict[str, list[float]] = {q: [] for q in queries}
        for _ in range(args.repeat):
            for query in queries:
                out: list[tuple[float, float, bool]] = []
                start = time.monotonic()
                threads = [
                    threading.Thread(target=one_probe, args=(nvcc, cuobjdump, start, out, QUERIES[query]))
                    for _ in range(count)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                if len(out) < count or not all(ok for *_, ok in out):
                    failed = True
                tools[query] += [t for t, _, _ in out]
                gpus[query] += [g for _, g, _ in out]
                leads[query] += [max(g - t, 0.0) for t, g, _ in out]
        if failed or not all(tools.values()):
            failed = True
            print(f"K={count}: a probe program did not exit 0: no figure")
            continue
        for query in queries:
            print(
                f"K={count}{f' {query}' if len(queries) > 1 else ''}: toolchain answered median "
                f"{statistics.median(tools[query]) * 1000:.0f} ms (p90 {percentile(tools[query], 0.9) * 1000:.0f}); "
                f"GPU part median {statistics.median(gpus[query]) * 1000:.0f} ms "
                f"(p90 {percentile(gpus[query], 0.9) * 1000:.0f}); GPU part after the toolchain's: median "
                f"{statistics.median(leads[query]) * 1000:.0f} ms, p90 {percentile(leads[query], 0.9) * 1000:.0f} ms"
            )
        if len(queries) == 2:
            first, second = queries
            ratio = statistics.median(gpus[second]) / statistics.median(gpus[first])
            print(f"K={count}: GPU part, {second} / {first} query: {ratio:.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
