#!/usr/bin/env python3
"""Benchmark (not a test): what the probe's driver query costs on a GPU machine.

The probe checks nvidia-smi's word against the driver's own view of each card
(orchestrator/run/driver_check.py). This times, side by side in one run, each in a fresh
`python3 -I -S` as the probe starts it, --repeat times:

    cuda    the probe's query until session 7, through libcuda (cuInit, then name, CC, UUID)
    nvml    the probe's query now, through libnvidia-ml (nvmlInit, then name, CC, UUID)
    python  `pass`: the interpreter's own start-up, for scale

and prints wall and CPU seconds (min / median) and each query's answer, so the
two can be compared card by card. A query that fails prints no ratio.

    python3 bench/driver_query.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import ast
import os
import resource
import statistics
import subprocess
import sys
import time

# The probe's query before session 7 (orchestrator/run/probe.py then): the same facts
# through libcuda. CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR are 75 and 76.
CUDA_QUERY = r"""
import ctypes, sys
def query():
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        return ["error cannot load libcuda.so.1 (%s)" % err]
    rc = cu.cuInit(0)
    if rc:
        return ["error cuInit returned %d" % rc]
    count = ctypes.c_int()
    cu.cuDeviceGetCount(ctypes.byref(count))
    lines = []
    for ordinal in range(count.value):
        dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), ordinal)
        name = ctypes.create_string_buffer(256); cu.cuDeviceGetName(name, 256, dev)
        major, minor = ctypes.c_int(), ctypes.c_int()
        cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
        cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
        raw = (ctypes.c_ubyte * 16)(); cu.cuDeviceGetUuid(raw, dev)
        h = bytes(raw).hex()
        uuid = "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])
        lines.append("gpu|%s|%d.%d|%s" % (uuid, major.value, minor.value, name.value.decode("utf-8", "replace")))
    return lines
"""

DRIVER_CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "orchestrator", "run", "driver_check.py")


def queries() -> dict[str, str]:
    """The probe's query texts, read from its source: this runs where the farm's
    dependencies may not be installed (a bare GPU machine's python3)."""
    with open(DRIVER_CHECK, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    return {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }


def once(code: str) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(["python3", "-I", "-S", "-c", code], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, (done.stdout + done.stderr).strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    texts = queries()
    kinds = {"cuda": CUDA_QUERY + texts["QUERY_PRINT"], "nvml": texts["NVML_QUERY"] + texts["QUERY_PRINT"]}
    kinds["python"] = "pass"
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    cpus: dict[str, list[float]] = {k: [] for k in kinds}
    answers: dict[str, str] = {}
    for _ in range(args.repeat):  # interleaved: the machine's drift falls on each alike
        for kind, code in kinds.items():
            wall, cpu, out = once(code)
            walls[kind].append(wall)
            cpus[kind].append(cpu)
            answers[kind] = out
    for kind in kinds:
        print(
            f"{kind:<7} wall min {min(walls[kind]):.3f} s median {statistics.median(walls[kind]):.3f} s; "
            f"cpu min {min(cpus[kind]):.3f} s median {statistics.median(cpus[kind]):.3f} s"
        )
    for kind in ("cuda", "nvml"):
        print(f"{kind} answered:\n  " + answers[kind].replace("\n", "\n  "))
    failed = [k for k in ("cuda", "nvml") if not answers[k].startswith("gpu|")]
    if failed:
        print(f"no ratio: {', '.join(failed)} did not answer with a device")
        return 1
    print(
        f"ratio nvml / cuda, median wall: {statistics.median(walls['nvml']) / statistics.median(walls['cuda']):.3f}; "
        f"median cpu: {statistics.median(cpus['nvml']) / statistics.median(cpus['cuda']):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
