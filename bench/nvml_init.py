"""Benchmark aid (not a test): what NVML's start costs a fresh python3, by how it is started.

The probe asks the driver through NVML (driver_check.NVML_QUERY) in every node's python3:
on a fleet of nodes sharing one machine's cores, that start is paid once per node.
Each mode runs 10 times in a fresh `python3 -I -S`, interleaved; prints the median
and least CPU (the child's user + system) and wall per mode, and the first round's
answer of each (rc of init, rc of the device count, the count, the devices).

    pass     python3 alone
    ctypes   + loading libnvidia-ml.so.1
    v2       nvmlInit_v2 and the probe's queries (what driver_check.py asks)
    flags0   nvmlInitWithFlags(0), the same queries
    flags2   nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH): no GPU is attached

    python3 bench/nvml_init.py          (on a machine with the NVIDIA driver)
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time

BODY = r"""
import ctypes, sys
mode = sys.argv[1]
if mode == "pass":
    raise SystemExit
ml = ctypes.CDLL("libnvidia-ml.so.1")
if mode == "ctypes":
    raise SystemExit
rc = ml.nvmlInit_v2() if mode == "v2" else ml.nvmlInitWithFlags(int(mode[5:]))
count = ctypes.c_uint()
rc2 = ml.nvmlDeviceGetCount_v2(ctypes.byref(count))
out = []
for i in range(count.value):
    dev = ctypes.c_void_p()
    uuid, name = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
    major, minor = ctypes.c_int(), ctypes.c_int()
    r = (
        ml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev))
        or ml.nvmlDeviceGetUUID(dev, uuid, 96)
        or ml.nvmlDeviceGetName(dev, name, 96)
        or ml.nvmlDeviceGetCudaComputeCapability(dev, ctypes.byref(major), ctypes.byref(minor))
    )
    out.append((r, uuid.value[:16], name.value, major.value, minor.value))
ml.nvmlShutdown()
print(mode, rc, rc2, count.value, out)
"""
MODES = ["pass", "ctypes", "v2", "flags0", "flags2"]


def main() -> int:
    seen: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    for round_ in range(10):
        for mode in MODES:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-I", "-S", "-c", BODY, mode], capture_output=True, text=True)
            wall = time.monotonic() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            seen[mode].append((cpu, wall))
            if round_ == 0 and done.stdout:
                print(done.stdout.strip()[:300], done.stderr.strip()[-200:])
    for mode in MODES:
        cpus, walls = [c for c, _ in seen[mode]], [w for _, w in seen[mode]]
        print(
            f"{mode:7s} CPU median {statistics.median(cpus) * 1000:.1f} ms min {min(cpus) * 1000:.1f}; "
            f"wall median {statistics.median(walls) * 1000:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
