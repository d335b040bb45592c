#!/usr/bin/env python3
"""Benchmark (not a test): how long `orchestrator.report.site.render` takes on a big store.

Builds a synthetic results database -- by default 64 nodes x 50 variants
(10 kernels x 5 variants) x 30 runs = 96,000 result rows -- in a SQLite file
under a temporary folder, with realistic contents: node snapshots per run (CC
7.5 to 9.0 and build boxes without a GPU, drivers, nvcc 13.0.88, a node now and
then unreachable), mostly as-expected outcomes with a few percent fail /
infra-error / timeout, flaky cells that flip from run to run and broken cells
that fail from a regression to its fix, kernels whose source changed (two
sha256 for one kernel), logs of real sizes. Then renders the latest run's
report, each time in a fresh Python process (so peak RSS is the render's own),
two ways:

    cold  into an empty folder (the first render of a site), --repeat times;
    warm  into a copy of a cold render's folder after one more run was written
          to the database (what `farm verify` does at the end of every run:
          render into its kept reports/), --repeat times;

and prints both side by side against the targets: 2 s per render, 1 MB for
index.html, with the ratios to them. A render that fails stops the bench
before any ratio is printed.

    PYTHONPATH=. python3 bench/report_render.py [--nodes 64 --variants 50 --runs 30]
                                                [--repeat 3] [--profile] [--keep DIR]

--profile adds three untimed renders: a cold and a warm one with timers on
their seams (each Store query, each template, each page write: exclusive
times, no profiler distortion), a warm one under cProfile (grouped by package,
top functions); then says what index.html is made of.

The database is written with SQLAlchemy Core bulk inserts (one transaction per
run), through Store(url) so the schema is the farm's own. Rows are filled column
by column from the models' tables, so a column added later gets a plain default
(nullable -> None, JSON -> {} or [], Boolean -> False, Integer -> 0, text -> "",
bytes -> b"", DateTime -> now; a column with its own default gets that) and this
script keeps working; values generated here for columns that no longer exist
are dropped, with a note. Tables it knows besides runs, node_snapshots and
results (source_files, planned_cells, attempts, metric_values, sass_counts) are filled when they exist;
other new tables are left empty, with a note.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET_SECONDS = 2.0
TARGET_INDEX_BYTES = 1_000_000
CHILD_MARK = "@@bench "

# ---------------------------------------------------------------------------
# the synthetic farm

# (gpu name, cc, memory, gpu count) per node family; None: a build box without a GPU
GPU_FAMILIES: list[tuple[str, str | None, str | None, str | None, int]] = [
    ("t4", "Tesla T4", "7.5", "15360 MiB", 1),
    ("a100", "NVIDIA A100-SXM4-80GB", "8.0", "81920 MiB", 8),
    ("a10", "NVIDIA A10", "8.6", "23028 MiB", 1),
    ("rtx3090", "NVIDIA GeForce RTX 3090", "8.6", "24576 MiB", 2),
    ("l4", "NVIDIA L4", "8.9", "23034 MiB", 1),
    ("rtx4090", "NVIDIA GeForce RTX 4090", "8.9", "24564 MiB", 1),
    ("h100", "NVIDIA H100 80GB HBM3", "9.0", "81559 MiB", 8),
    ("h200", "NVIDIA H200", "9.0", "143771 MiB", 8),
    ("build", None, None, None, 0),
]
DRIVERS = ["580.82.07", "580.65.06", "575.57.08"]
NVCC_VERSION = "13.0.88"
NVCC_PATH = "/usr/local/cuda-13.0/bin/nvcc"
OSES = ["Ubuntu 22.04.5 LTS", "Ubuntu 24.04.2 LTS", "Debian GNU/Linux 12 (bookworm)"]

KERNEL_NAMES = [
    "cutlass_gemm",
    "wgmma_gemm",
    "flash_attention",
    "softmax",
    "layernorm",
    "reduce_sum",
    "prefix_scan",
    "transpose",
    "conv2d_implicit",
    "tma_copy",
    "histogram",
    "spmv_csr",
]
# (variant name, flags, contract kind, cc, instructions)
VARIANT_KINDS: list[tuple[str, str, str, str | None, dict[str, int]]] = [
    ("sm75", "-arch=sm_75", "min", "7.5", {"HMMA": 1}),
    ("sm80", "-arch=sm_80 -DUSE_CP_ASYNC", "min", "8.0", {"HMMA": 1, "LDGSTS": 1}),
    ("sm86", "-arch=sm_86", "min", "8.6", {"HMMA": 1}),
    ("sm89", "-arch=sm_89 -DUSE_FP8", "min", "8.9", {"HMMA": 1, "F2FP": 1}),
    ("gencode", "-gencode arch=compute_90a,code=sm_90a", "exactly", "9.0", {"HGMMA": 1}),
    ("documented", "-arch=sm_90a", "exactly", "9.0", {"HGMMA": 1}),
    ("ptx", "-gencode arch=compute_75,code=compute_75", "min", "7.5", {"FFMA": 1}),
    ("fast_math", "-arch=sm_80 --use_fast_math", "min", "8.0", {"FFMA": 1, "MUFU": 1}),
    ("lineinfo", "-arch=sm_75 -lineinfo", "min", "7.5", {"FFMA": 1}),
    ("debug", "-arch=sm_80 -G", "min", "8.0", {"FFMA": 1}),
]
KNOWN_FAILURE_REASON = (
    "nvcc 13.0 expands -arch=sm_90a into sm_90a plus a plain compute_90 PTX pass, and "
    "ptxas rejects every wgmma instruction on .target sm_90 (\"Instruction 'wgmma.fence' "
    "not supported on .target 'sm_90'\"). The gencode variant builds the same source for "
    "sm_90a alone."
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def cc_key(cc: str) -> tuple[int, int]:
    major, minor = cc.split(".")
    return int(major), int(minor)


class Farm:
    """Nodes, kernels and variants of the synthetic farm; deterministic per seed."""

    def __init__(self, n_nodes: int, n_variants: int, n_runs: int, seed: int) -> None:
        rng = random.Random(seed)
        self.rng = rng
        self.n_runs = n_runs
        # nodes: spread over the families, a few build boxes
        self.nodes: list[dict[str, Any]] = []
        counters: Counter[str] = Counter()
        for i in range(n_nodes):
            family = GPU_FAMILIES[i % len(GPU_FAMILIES)]
            prefix = family[0]
            counters[prefix] += 1
            name = f"{prefix}-{counters[prefix]:02d}"
            self.nodes.append(
                {
                    "name": name,
                    "family": family,
                    "index": i,
                    "address": f"farm@10.{20 + i // 250}.{i % 250}.{11 + i % 7}:22",
                    "driver": DRIVERS[i % len(DRIVERS)],
                    "os": OSES[i % len(OSES)],
                    # one node whose card was swapped: farm.yaml still says 8.0
                    "declared_cc": "8.0" if (prefix == "a10" and counters[prefix] == 1) else None,
                }
            )
        # the controller's own build box is the local node
        for node in self.nodes:
            if node["family"][0] == "build":
                node["transport"] = "local"
                break
        # kernels x variants: n_variants cells per node, spread over up to 10 kernels
        n_kernels = max(1, min(10, n_variants // 5 or 1, len(KERNEL_NAMES)))
        per_kernel = [n_variants // n_kernels + (k < n_variants % n_kernels) for k in range(n_kernels)]
        self.variants: list[dict[str, Any]] = []
        for k in range(n_kernels):
            kernel = KERNEL_NAMES[k]
            kinds = list(VARIANT_KINDS)
            if kernel != "wgmma_gemm":
                kinds = [v for v in kinds if v[0] != "documented"]
            rng.shuffle(kinds)
            if kernel == "wgmma_gemm":  # the course's known failure is always listed
                kinds.sort(key=lambda v: v[0] != "documented")
            for j in range(per_kernel[k]):
                vname, flags, kind, cc, instr = kinds[j % len(kinds)]
                if j >= len(kinds):
                    vname = f"{vname}_{j // len(kinds)}"
                contract = f"CC == {cc}" if kind == "exactly" else f"CC >= {cc}"
                self.variants.append(
                    {
                        "kernel": kernel,
                        "variant": vname,
                        "flags": flags,
                        "kind": kind,
                        "cc": cc,
                        "contract": contract,
                        "instructions": instr,
                        "known_failure": kernel == "wgmma_gemm" and vname == "documented",
                        **targets(flags),
                    }
                )
        self.kernels = list(dict.fromkeys(v["kernel"] for v in self.variants))
        # sources: every kernel has sha A; some change to sha B mid-history (staleness),
        # the first kernel changes on the latest run itself
        self.source_change: dict[str, int | None] = {}
        for k, kernel in enumerate(self.kernels):
            if k == 0:
                self.source_change[kernel] = n_runs - 1
            elif k % 3 == 1:
                self.source_change[kernel] = rng.randrange(1, max(2, n_runs))
            else:
                self.source_change[kernel] = None
        self.sources: dict[tuple[str, int], tuple[str, str, bytes]] = {}
        for kernel in self.kernels:
            for version in (0, 1):
                header = (
                    "// VERIFIED 2026-09-02: passes on H100 (CC 9.0)\n"
                    if version == 0 and kernel == "wgmma_gemm"
                    else "// UNVERIFIED: not yet run on real hardware\n"
                )
                body = header + (f"// {kernel} v{version}\n" + "__global__ void k() {}\n" * 40)
                content = body.encode()
                self.sources[(kernel, version)] = (
                    f"kernels/{kernel}.cu",
                    hashlib.sha256(content).hexdigest(),
                    content,
                )
        # flaky cells flip between outcomes from run to run; broken cells fail for a
        # stretch of runs (from a regression to its fix, which may not have come yet)
        cells = [(v["kernel"], v["variant"], n["name"]) for v in self.variants for n in self.nodes]
        self.flaky = {c for c in cells if rng.random() < 0.03}
        self.broken: dict[tuple[str, str, str], tuple[int, int, float]] = {}
        for c in cells:
            if c not in self.flaky and rng.random() < 0.04:
                start = rng.randrange(n_runs)
                self.broken[c] = (start, start + rng.randint(1, n_runs), rng.random())
        self.base_time = datetime.now(UTC).replace(microsecond=0) - timedelta(days=n_runs)
        self.metric_history: dict[tuple[str, ...], list[float]] = {}  # cell and metric -> values so far
        self.metric_rng = random.Random(seed + 1)

    def source_version(self, kernel: str, run_index: int) -> int:
        change = self.source_change[kernel]
        return 1 if change is not None and run_index >= change else 0


def targets(flags: str) -> dict[str, list[str]]:
    """The cubins and PTX an nvcc command line embeds (what cuobjdump would list)."""
    if "-arch=" in flags:
        arch = flags.split("-arch=", 1)[1].split()[0]
        return {"elf": [arch], "ptx": [arch]}
    code = flags.split("code=", 1)[1].split()[0]
    arch = code.replace("compute_", "sm_")
    return {"elf": [], "ptx": [arch]} if code.startswith("compute_") else {"elf": [arch], "ptx": []}


def sass_count(src_sha: str, flags: str, instruction: str) -> int:
    return 1 + int(sha(f"{src_sha} {flags} {instruction}")[:6], 16) % 511


def code_path_for(cc: str | None, elf: list[str], ptx: list[str]) -> str | None:
    """As machine_code.code_path_for decides it: own cubin, else forward-compatible PTX."""
    if cc is None:
        return None
    target = int(cc.replace(".", ""))
    if any(int(re.sub(r"\D", "", a)) == target for a in elf):
        return "native"
    if any(int(re.sub(r"\D", "", a)) <= target and not a.endswith("a") for a in ptx):
        return "ptx-jit"
    return "no-code"


def expectation(variant: dict[str, Any], cc: str | None) -> tuple[str, str]:
    """(contract outcome, reason), as plan.expect derives it."""
    if cc is None:
        return "compile-only", "the node has no GPU: build and inspect only"
    exactly = variant["kind"] == "exactly"
    admits = cc == variant["cc"] if exactly else cc_key(cc) >= cc_key(variant["cc"])
    if admits:
        return "pass", f"CC {cc} satisfies {variant['contract']}"
    return "expected-refusal", f"CC {cc} is outside {variant['contract']}: the gate must refuse"


def build_log(variant: dict[str, Any], node: str, rng: random.Random) -> bytes:
    regs = rng.randrange(32, 255)
    lines = [
        "ptxas info    : 0 bytes gmem, 24 bytes cmem[4]",
        f"ptxas info    : Compiling entry function '_Z{len(variant['kernel'])}"
        f"{variant['kernel']}PKfPfiii' for '{(variant['elf'] or ['sm_75'])[0]}'",
        f"ptxas info    : Function properties for _Z{variant['kernel']}PKfPfiii",
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        f"ptxas info    : Used {regs} registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]",
        f"ptxas info    : Compile time = {rng.uniform(50, 900):.3f} ms",
        f'{variant["kernel"]}.cu(118): warning #177-D: variable "lane" was declared but never referenced',
        "      int lane = threadIdx.x % 32;",
        "          ^",
        'Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"',
        f'{variant["kernel"]}.cu(204): warning #550-D: variable "smem_b" was set but never used',
        "      float* smem_b = smem + TILE_M * TILE_K;",
        "             ^",
        f"nvcc {NVCC_VERSION} on {node}: {variant['flags']}",
    ]
    return ("\n".join(lines) + "\n").encode()


def run_stdout(variant: dict[str, Any], gpu: str, cc: str, ok: bool, rng: random.Random) -> bytes:
    lines = [
        f"device 0: {gpu} (CC {cc}), {rng.randrange(40, 140)} SMs",
        f"{variant['kernel']}: M=N=K=512, tile 128x128x32, {rng.randrange(2, 5)} stages",
        f"kernel time {rng.uniform(0.05, 3.0):.3f} ms ({rng.uniform(5, 600):.1f} TFLOP/s)",
        f"max abs error {rng.uniform(1e-6, 1e-3):.3e}, max rel error {rng.uniform(1e-6, 1e-3):.3e}",
    ]
    if ok:
        lines.append("all 262144 output elements are inside the tolerance")
    else:
        lines.append(f"MISMATCH at ({rng.randrange(512)}, {rng.randrange(512)}): got 0.0")
        lines.append("12 of 262144 output elements are outside the tolerance")
    return ("\n".join(lines) + "\n").encode()


def result_rows(
    farm: Farm, run_index: int, run_id: int, first_id: int, snapshots: dict[str, dict]
) -> list[dict[str, Any]]:
    rng = farm.rng
    rows: list[dict[str, Any]] = []
    clock = farm.base_time + timedelta(days=run_index, minutes=1)
    rid = first_id
    for node in farm.nodes:
        snap = snapshots[node["name"]]
        _, gpu, cc, _, _ = node["family"]
        for v in farm.variants:
            kernel = v["kernel"]
            path, src_sha, _ = farm.sources[(kernel, farm.source_version(kernel, run_index))]
            contract_expected, reason_expected = expectation(v, cc)
            expected = "known-failure" if v["known_failure"] else contract_expected
            key = (kernel, v["variant"], node["name"])
            roll = rng.random()
            span = farm.broken.get(key)
            if key in farm.flaky:  # flips from run to run
                bad, kind = rng.random() < 0.45, rng.random() * 0.9
            elif span is not None and span[0] <= run_index < span[1]:  # a regression, until fixed
                bad, kind = True, span[2]
            else:  # a rare one-off
                bad, kind = rng.random() < 0.004, rng.random()
            started = clock + timedelta(seconds=rng.uniform(0, 1800))
            build_s = round(rng.uniform(2.0, 45.0), 3)
            inspect_s = round(rng.uniform(0.2, 2.0), 3)
            run_s = round(rng.uniform(0.3, 8.0), 3)
            cached = run_index > 0 and farm.source_version(kernel, run_index) == farm.source_version(
                kernel, run_index - 1
            )
            if cached:
                build_s = round(rng.uniform(0.05, 0.3), 3)
            failed_stage = None
            exit_code: int | None = 0
            stdout = b""
            stderr = b""
            if snap["probe_error"]:
                outcome, failed_stage, reason = "infra-error", "probe", snap["probe_error"]
                exit_code = None
            elif v["known_failure"]:
                outcome, failed_stage = "known-failure", "build"
                reason = f"known failure: {KNOWN_FAILURE_REASON}"
                exit_code = None
            elif roll < 0.008:
                outcome, failed_stage, exit_code = "infra-error", "build", None
                reason = f"node {node['name']!r}: the SSH session dropped (Connection reset by peer)"
            elif bad and contract_expected == "pass" and kind < 0.7:
                outcome, failed_stage, exit_code = "fail", "run", 1
                reason = "exit 1 and no pass marker in stdout"
                stdout = run_stdout(v, gpu, cc, False, rng)
            elif bad and contract_expected == "pass" and kind < 0.9:
                outcome, failed_stage, exit_code = "timeout", "run", 124
                reason = "the run outlived its timeout (120 s) and was killed"
                run_s = 120.0
                stdout = f"device 0: {gpu} (CC {cc})\n".encode()
            elif bad and contract_expected == "expected-refusal" and kind < 0.7:
                outcome, failed_stage, exit_code = "missing-refusal", "run", 139
                reason = f"ran on a card it must refuse ({reason_expected})"
                stderr = b"Segmentation fault (core dumped)\n"
            elif bad:
                outcome, failed_stage, exit_code = "build-fail", "build", None
                reason = "nvcc exited 2"
            elif contract_expected == "pass":
                outcome, reason = "pass", "ran and printed the pass marker"
                stdout = run_stdout(v, gpu, cc, True, rng)
            elif contract_expected == "expected-refusal":
                outcome, exit_code = "expected-refusal", 2
                reason = "refused with the gate's text"
                stdout = f"device 0: {gpu} (CC {cc})\n".encode()
                stderr = (
                    f"this build needs compute capability {v['cc']} and this device is {cc}; refusing to launch\n"
                ).encode()
            else:
                outcome, reason, exit_code = "compile-only", "built and inspected; no GPU", None
            stages: dict[str, dict[str, str]] = {
                "probe": {"status": "ok", "detail": ""},
                "stage": {"status": "ok", "detail": f"{rng.randrange(0, 90000)} bytes shipped"},
            }
            seconds = {"probe": snap["probe_seconds"] or 0.0, "stage": snap["stage_seconds"] or 0}
            if snap["probe_error"]:
                stages = {"probe": {"status": "infra", "detail": snap["probe_error"]}}
                seconds = {"probe": 10.0}
            else:
                bstatus = "failed" if failed_stage == "build" and outcome != "infra-error" else "ok"
                if outcome == "infra-error":
                    bstatus = "infra"
                stages["build"] = {"status": "cached" if cached else bstatus, "detail": ""}
                seconds["build"] = build_s
                if failed_stage != "build":
                    stages["inspect"] = {"status": "ok", "detail": ""}
                    seconds["inspect"] = inspect_s
                    if cc is not None:
                        rstatus = "failed" if failed_stage == "run" else "ok"
                        detail = reason if rstatus == "failed" else ""
                        stages["run"] = {"status": rstatus, "detail": detail}
                        seconds["run"] = run_s
            built = failed_stage not in ("build", "probe")
            elf = v["elf"] if built else []
            ptx = v["ptx"] if built else []
            code_path = code_path_for(cc, elf, ptx) if built else None
            log = build_log(v, node["name"], rng) if not snap["probe_error"] else b""
            # the same inputs and flags build the same machine code: the same counts (the
            # random draws are still made, so the rest of the data set stays as it was)
            counts = {}
            if built:
                counts = {k: (rng.randrange(1, 512), sass_count(src_sha, v["flags"], k))[1] for k in v["instructions"]}
            rows.append(
                {
                    "id": rid,
                    "run_id": run_id,
                    "snapshot_id": snap["id"],
                    "kernel": kernel,
                    "variant": v["variant"],
                    "node": node["name"],
                    "contract": v["contract"],
                    "expected": expected,
                    "contract_expected": contract_expected,
                    "expected_reason": reason_expected,
                    "known_failure_reason": KNOWN_FAILURE_REASON if v["known_failure"] else None,
                    "outcome": outcome,
                    "failed_stage": failed_stage,
                    "reason": reason,
                    "exit_code": exit_code,
                    "stage_seconds": seconds,
                    "stage_details": stages,
                    "build_command": (
                        f"{NVCC_PATH} -std=c++17 -O3 {v['flags']} -o "
                        f"/home/farm/.cache/farm/builds/{node['name']}/{kernel}-{v['variant']}-"
                        f"{src_sha[:20]}/{kernel}-{v['variant']} "
                        f"/home/farm/.cache/farm/sources/{src_sha[:16]}/{path}"
                    ),
                    "build_cached": cached,
                    "build_log": log,
                    "stdout": stdout,
                    "stderr": stderr,
                    "stdout_size": len(stdout),
                    "stderr_size": len(stderr),
                    "source_sha256": src_sha,
                    "sources": {path: src_sha},
                    # the card it ran on, and the certificate identity (one source, no dependency)
                    "device": snap["gpu_name"] or node["family"][1] or "",
                    "cc": snap["cc"],
                    "real_gpu": bool(snap.get("real_gpu")) and snap["cc"] is not None,
                    "identity": sha(f"file {src_sha} {path}"),
                    "binary_sha256": sha(f"{src_sha}{v['flags']}") if built else None,
                    "instruction_counts": counts,
                    "required_instructions": dict(v["instructions"]),
                    "elf_targets": elf,
                    "ptx_targets": ptx,
                    "code_path": code_path,
                    "started_at": started,
                    "ended_at": started + timedelta(seconds=sum(seconds.values())),
                }
            )
            rid += 1
    return rows


METRIC_BASELINE = 5  # metrics.BASELINE: earlier values a verdict needs
RUN_NOTE = "the kernel's own seconds on the node"


def evidence_rows(farm: Farm, results: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A run's metric_values and sass_counts rows, as Store.add_result writes them: the
    instruction counts of every inspected result; for each pass, the `run` metric
    (the kernel's seconds, every job) and `tflops` from its stdout (every other
    kernel), each judged against the median of the cell's last 5 values. The values
    are drawn per cell (steady, a slow run now and then), not read from the
    generated stdout and stage seconds, which are random from run to run."""
    metric_rows: list[dict[str, Any]] = []
    sass_rows: list[dict[str, Any]] = []
    for x in results:
        for name, count in x["instruction_counts"].items():
            sass_rows.append({"result_id": x["id"], "identity": x["identity"], "instruction": name, "count": count})
        if x["outcome"] != "pass":
            continue
        # each cell has its own speed, a few percent of noise from run to run, and now and then
        # a slow run (from their own random stream: the rest of the data set stays as it was)
        cell = f"{x['kernel']} {x['variant']} {x['node']}"
        base = 0.3 + int(sha(cell)[:6], 16) % 7000 / 1000
        slow = 1.5 if farm.metric_rng.random() < 0.01 else 1.0
        found = [("run", round(base * slow * farm.metric_rng.uniform(0.97, 1.03), 3), "s", "lower", 0.25, RUN_NOTE)]
        if farm.kernels.index(x["kernel"]) % 2 == 0:
            tflops = round(5 + 600 / base / slow * farm.metric_rng.uniform(0.97, 1.03), 1)
            found.append(("tflops", tflops, "TFLOP/s", "higher", 0.1, "from the last matching stdout line"))
        for name, value, unit, better, tolerance, note in found:
            past = farm.metric_history.setdefault((x["kernel"], x["variant"], x["node"], x["device"], name), [])
            baseline = statistics.median(past[-METRIC_BASELINE:]) if len(past) >= METRIC_BASELINE else None
            worse = None
            if value is not None and baseline:
                worse = ((baseline - value) if better == "higher" else (value - baseline)) / abs(baseline)
            metric_rows.append(
                {
                    "result_id": x["id"],
                    "run_id": x["run_id"],
                    "kernel": x["kernel"],
                    "variant": x["variant"],
                    "node": x["node"],
                    "device": x["device"],
                    "name": name,
                    "value": value,
                    "unit": unit,
                    "better": better,
                    "tolerance": tolerance,
                    "note": note,
                    "baseline": baseline,
                    "regressed": worse is not None and worse > tolerance,
                }
            )
            if value is not None:
                past.append(value)
    return metric_rows, sass_rows


def snapshot_rows(farm: Farm, run_index: int, run_id: int, first_id: int) -> dict[str, dict[str, Any]]:
    rng = farm.rng
    out: dict[str, dict[str, Any]] = {}
    for offset, node in enumerate(farm.nodes):
        _prefix, gpu, cc, memory, count = node["family"]
        down = rng.random() < 0.015  # unreachable for this run
        declared = node["declared_cc"] or cc
        row = {
            "id": first_id + offset,
            "run_id": run_id,
            "node": node["name"],
            "transport": node.get("transport", "ssh"),
            "address": "local" if node.get("transport") == "local" else node["address"],
            "hostname": None if down else f"{node['name']}.farm.example.org",
            "os": None if down else node["os"],
            "gpu_name": None if down else gpu,
            "cc": None if down else cc,
            "driver": None if down or gpu is None else node["driver"],
            "memory": None if down else memory,
            "gpu_count": 0 if down else count,
            "nvcc_path": NVCC_PATH,
            "nvcc_version": None if down else NVCC_VERSION,
            "declared_gpu": gpu,
            "declared_cc": declared,
            "cc_mismatch": bool(not down and cc and declared != cc),
            "real_gpu": bool(not down and gpu),
            "driver_evidence": (
                None
                if down or gpu is None
                else f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {node['driver']}  "
                "Release Build  (dvs-builder@U22-I3-AF03-09-1)\n/dev/nvidiactl"
            ),
            "probe_error": (
                f"node {node['name']!r}: cannot connect to {node['address']}: timed out after 10 s" if down else None
            ),
            "probe_seconds": None if down else round(rng.uniform(0.4, 3.0), 3),
            "stage_seconds": None if down else round(rng.uniform(0.1, 6.0), 3),
            "bytes_shipped": 0 if down else rng.randrange(4000, 900000),
            "smi_output": (
                None
                if down or gpu is None
                else "\n".join(f"{gpu}, {cc}, {node['driver']}, {memory}" for _ in range(count))
            ),
        }
        out[node["name"]] = row
    return out


def attempt_rows(
    run_id: int, snaps: list[dict[str, Any]], results: list[dict[str, Any]], at: datetime
) -> list[dict[str, Any]]:
    """As the executor records tries: one per node setup and per cell, and the
    retries of infra failures (three tries in all)."""
    rows: list[dict[str, Any]] = []
    base = {"run_id": run_id, "at": at}
    for snap in snaps:
        error = snap["probe_error"]
        for attempt in range(1, 4 if error else 2):
            rows.append(
                {
                    **base,
                    "node": snap["node"],
                    "kernel": None,
                    "variant": None,
                    "attempt": attempt,
                    "status": "infra" if error else "ok",
                    "stage": "probe" if error else None,
                    "error": error,
                }
            )
    for x in results:
        if x["failed_stage"] == "probe":
            continue
        infra = x["outcome"] == "infra-error"
        for attempt in range(1, 4 if infra else 2):
            rows.append(
                {
                    **base,
                    "node": x["node"],
                    "kernel": x["kernel"],
                    "variant": x["variant"],
                    "attempt": attempt,
                    "status": "infra" if infra else "ok",
                    "stage": x["failed_stage"] if infra else None,
                    "error": x["reason"] if infra else None,
                }
            )
    return rows


# ---------------------------------------------------------------------------
# filling rows from whatever columns the models have today


class Filler:
    """Maps generated values onto a table's current columns."""

    def __init__(self, model: Any, now: datetime) -> None:
        import sqlalchemy as sa

        self.table = model.__table__
        self.names = [c.key for c in self.table.columns]
        self.defaults: dict[str, Any] = {}
        self.dropped: set[str] = set()
        annotations = {}
        for klass in reversed(model.__mro__):
            annotations.update(getattr(klass, "__annotations__", {}))
        for col in self.table.columns:
            if col.default is not None or col.server_default is not None:
                value: Any = _KEEP_OUT
            elif col.primary_key and isinstance(col.type, sa.Integer):
                value = _KEEP_OUT  # numbered by the database
            elif col.nullable and not col.primary_key:
                value = None
            elif isinstance(col.type, sa.JSON):
                value = [] if "list[" in str(annotations.get(col.key, "")) else {}
            elif isinstance(col.type, sa.Boolean):
                value = False
            elif isinstance(col.type, sa.Integer):
                value = 0
            elif isinstance(col.type, sa.Float | sa.Numeric):
                value = 0.0
            elif isinstance(col.type, sa.Enum):
                value = col.type.enums[0] if col.type.enums else ""
            elif isinstance(col.type, sa.String):
                value = ""
            elif isinstance(col.type, sa.LargeBinary):
                value = b""
            elif isinstance(col.type, sa.DateTime):
                value = now
            elif isinstance(col.type, sa.Date):
                value = date.today()
            else:
                value = None
            self.defaults[col.key] = value

    def rows(self, generated: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not generated:
            return []
        first = generated[0]
        self.dropped |= set(first) - set(self.names)
        keep = [n for n in self.names if n in first or self.defaults[n] is not _KEEP_OUT]
        fill = {n: self.defaults[n] for n in keep if n not in first}
        given = [n for n in keep if n in first]
        return [{**fill, **{n: g[n] for n in given}} for g in generated]


_KEEP_OUT = object()  # a column with its own default: left to SQLAlchemy / the database


# ---------------------------------------------------------------------------
# building the database


def build_database(db_path: Path, nodes: int, variants: int, runs: int, seed: int) -> dict:
    """Writes `runs` runs; the run after them is generated too (same farm, same random
    stream) and returned as "next_run" for insert_run: the warm render's new run."""
    from sqlalchemy import insert

    from orchestrator.store import database as store_mod

    clock = time.perf_counter()
    store = store_mod.Store(f"sqlite:///{db_path}")
    farm = Farm(nodes, variants, runs, seed)
    now = datetime.now(UTC)
    models = {m.local_table.name: m.class_ for m in store_mod.Base.registry.mappers}
    fillers = {name: Filler(model, now) for name, model in models.items()}
    filled = [
        *("runs", "node_snapshots", "results", "source_files", "planned_cells", "attempts"),
        *("metric_values", "sass_counts"),
    ]
    untouched = sorted(set(models) - set(filled) - {"farm_meta"})

    def put(conn: Any, table: str, generated: list[dict[str, Any]]) -> None:
        if table in fillers and generated:
            conn.execute(insert(models[table].__table__), fillers[table].rows(generated))

    next_run: dict[str, list[dict[str, Any]]] = {}

    engine = store.engine
    with engine.begin() as conn:
        put(
            conn,
            "source_files",
            [
                {"sha256": digest, "path": path, "content": content, "first_seen": farm.base_time}
                for (kernel, version), (path, digest, content) in farm.sources.items()
                if version == 0 or farm.source_change[kernel] is not None
            ],
        )
    n_results = 0
    snapshot_id = 1
    result_id = 1
    for r in range(runs + 1):
        run_id = r + 1
        started = farm.base_time + timedelta(days=r)
        run = {
            "id": run_id,
            "started_at": started,
            "ended_at": started + timedelta(minutes=47, seconds=r),
            "status": "finished",
            "trigger": "nightly" if r % 7 else "manual",
            "farm_commit": sha(f"commit {r // 5}")[:40],
            "farm_version": "0.1.0",
            "host": "farm-controller",
            "config_file": "/srv/farm/farm.yaml",
            "selection": "--all",
            "exit_code": 0,
        }
        snaps = snapshot_rows(farm, r, run_id, snapshot_id)
        results = result_rows(farm, r, run_id, result_id, snaps)
        bad = ("fail", "timeout", "missing-refusal", "build-fail")
        run["exit_code"] = 1 if any(x["outcome"] in bad for x in results) else 0
        planned = [
            {"run_id": run_id, "kernel": x["kernel"], "variant": x["variant"], "node": x["node"]} for x in results
        ]
        attempts = attempt_rows(run_id, list(snaps.values()), results, started)
        metric_values, sass_counts = evidence_rows(farm, results)
        tables = {
            "runs": [run],
            "planned_cells": planned,
            "node_snapshots": list(snaps.values()),
            "results": results,
            "attempts": attempts,
            "metric_values": metric_values,
            "sass_counts": sass_counts,
        }
        if r == runs:  # the warm render's new run: written later, by insert_run
            next_run = {name: fillers[name].rows(rows) for name, rows in tables.items() if name in fillers}
            break
        with engine.begin() as conn:
            for name, rows in tables.items():
                put(conn, name, rows)
        snapshot_id += len(snaps)
        result_id += len(results)
        n_results += len(results)
    store.close()
    seconds = time.perf_counter() - clock
    for fill in fillers.values():
        if fill.dropped:
            print(
                f"note: {fill.table.name} has no column(s) {', '.join(sorted(fill.dropped))}; "
                "their generated values were dropped"
            )
    if untouched:
        print(f"note: tables left empty (unknown to this bench): {', '.join(untouched)}")
    return {
        "seconds": seconds,
        "results": n_results,
        "nodes": len(farm.nodes),
        "variants": len(farm.variants),
        "kernels": len(farm.kernels),
        "runs": runs,
        "db_bytes": db_path.stat().st_size,
        "flaky_cells": len(farm.flaky),
        "changed_sources": sorted(k for k, c in farm.source_change.items() if c is not None),
        "next_run": next_run,
    }


def insert_run(db_path: Path, tables: dict[str, list[dict[str, Any]]]) -> float:
    """Writes one more run (build_database's "next_run"), as a farm run would have; returns seconds."""
    from sqlalchemy import insert

    from orchestrator.store import database as store_mod

    clock = time.perf_counter()
    store = store_mod.Store(f"sqlite:///{db_path}")
    models = {m.local_table.name: m.class_ for m in store_mod.Base.registry.mappers}
    with store.engine.begin() as conn:
        for name in ("runs", "planned_cells", "node_snapshots", "results", "attempts", "metric_values", "sass_counts"):
            if tables.get(name):
                conn.execute(insert(models[name].__table__), tables[name])
    store.close()
    return time.perf_counter() - clock


# ---------------------------------------------------------------------------
# rendering (in a child process: its peak RSS is the render's own)


def _rss_kb() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _instrument() -> dict[str, list]:
    """Wrap the render's seams with timers: every public Store method (a query and
    its ORM loading), reportdata.collect if report.py uses it, each Jinja2
    template's render (by template name) and the pages' _write. Times are exclusive
    (a query inside collect counts as the query's, not collect's). Cheap (a few
    thousand calls), so unlike cProfile it does not distort the split."""
    import jinja2

    from orchestrator.report import cell_pages
    from orchestrator.report import site as report
    from orchestrator.store import database as store

    timers: dict[str, list] = {}  # label -> [calls, exclusive seconds, bytes out]
    stack: list[float] = []  # time spent in timed callees, per open frame

    def wrap(owner: Any, name: str, label: Any) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            stack.append(0.0)
            clock = time.perf_counter()
            try:
                out = original(*args, **kwargs)
            finally:
                spent = time.perf_counter() - clock
                inner = stack.pop()
                if stack:
                    stack[-1] += spent
            entry = timers.setdefault(label(args), [0, 0.0, 0])
            entry[0] += 1
            entry[1] += spent - inner
            if isinstance(out, str):
                entry[2] += len(out.encode())
            elif name == "_write" and len(args) > 1:
                entry[2] += len(args[1].encode())
            return out

        setattr(owner, name, timed)

    members = {name: member for cls in reversed(store.Store.__mro__) for name, member in vars(cls).items()}
    for name, member in members.items():  # the queries are Store's through its bases (queries.py, certifying.py, ...)
        if callable(member) and not name.startswith("_") and name not in ("session", "close"):
            wrap(store.Store, name, lambda _a, n=name: f"query: Store.{n}")
    for name in ("collect",):
        if hasattr(report, name):
            wrap(report, name, lambda _a, n=name: f"model: {n} (queries excluded)")
    wrap(
        jinja2.Template,
        "render",
        lambda a: f"template: {getattr(a[0], 'name', None) or 'inline'}",
    )
    for module in (report, cell_pages):  # the site's pages, and its cell pages
        if hasattr(module, "_write"):
            wrap(module, "_write", lambda _a, m=module.__name__: f"write: {m}._write")
    return timers


def child_render(db: str, out: str, mode: str | None, profile: str | None) -> None:
    timers = _instrument() if mode == "phases" else None
    from orchestrator.report.site import render
    from orchestrator.store.database import Store

    store = Store(f"sqlite:///{db}")
    rss_before = _rss_kb()
    cpu = os.times()
    clock = time.perf_counter()
    if mode == "profile" and profile:
        profiler = cProfile.Profile()
        profiler.enable()
        index = render(store, Path(out))
        profiler.disable()
        profiler.dump_stats(profile)
    else:
        index = render(store, Path(out))
    seconds = time.perf_counter() - clock
    after = os.times()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    store.close()
    info = {
        "seconds": seconds,
        # with the page writer's (a child process, waited for before render returns)
        "cpu_seconds": sum(after[i] - cpu[i] for i in range(4)),
        "sys_seconds": (after.system - cpu.system) + (after.children_system - cpu.children_system),
        "rss_before_kb": rss_before,
        "rss_peak_kb": peak,
        "index": str(index),
        "timers": timers,
    }
    print(CHILD_MARK + json.dumps(info), flush=True)


def render_once(
    db: Path, out: Path, mode: str = "plain", profile: Path | None = None, kept: Path | None = None
) -> dict:
    """One render in a child process into `out`: empty (cold), or a copy of the folder
    `kept` that an earlier render wrote (warm: as `farm verify` renders into reports/)."""
    if out.exists():
        shutil.rmtree(out)
    if kept is not None:
        shutil.copytree(kept, out)  # copy2 keeps the mtimes: what the render writes is newer
    else:
        out.mkdir(parents=True)
    # the copy (and the database's new run) flushed to disk first, as a day-old reports/
    # folder would be: otherwise their writeback competes with the render's own writes
    os.sync()
    time.sleep(0.01)  # past the copies' mtimes on a coarse clock
    since = time.time_ns()
    load = os.getloadavg()[0]
    command = [sys.executable, __file__, "--child-render", str(db), str(out), mode]
    if profile:
        command += ["--child-profile", str(profile)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith(CHILD_MARK)), None)
    if done.returncode != 0 or line is None:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"render failed (exit {done.returncode})")
    info = json.loads(line[len(CHILD_MARK) :])
    info["load_before"] = load
    files = [p for p in out.rglob("*") if p.is_file()]
    info["files"] = len(files)
    info["written"] = sum(1 for p in files if p.stat().st_mtime_ns >= since)
    info["bytes"] = sum(p.stat().st_size for p in files)
    index = Path(info["index"])
    info["index_bytes"] = index.stat().st_size if index.exists() else 0
    info["largest"] = sorted(((p.stat().st_size, p.relative_to(out)) for p in files), reverse=True)[:3]
    info["by_dir"] = Counter(str(p.parent.relative_to(out)) for p in files)
    info["bytes_by_dir"] = Counter()
    for p in files:
        info["bytes_by_dir"][str(p.parent.relative_to(out))] += p.stat().st_size
    return info


# ---------------------------------------------------------------------------
# reading a profile and an index page


def _category(func: tuple[str, int, str]) -> str | None:
    """A function's own category, None for a builtin (charged to its callers)."""
    filename, _, name = func
    f = filename.replace("\\", "/")
    if filename == "~":
        if "sqlite3" in name:
            return "SQL execution (sqlite3)"
        if name.startswith("<built-in method posix.") or "_io." in name or "io.open" in name:
            return "file writing (open/write/rename/mkdir)"
        return None
    if "/sqlalchemy/" in f:
        return "SQLAlchemy (ORM load, row processing)"
    if "/json/" in f:
        return "JSON column decoding"
    if "/jinja2/" in f or "/markupsafe/" in f or f.endswith(".j2") or f == "<template>":
        return "template rendering (Jinja2)"
    if f.endswith(("/tempfile.py", "/os.py", "/pathlib.py", "/shutil.py", "/genericpath.py")):
        return "file writing (open/write/rename/mkdir)"
    if "/orchestrator/report" in f or "/orchestrator/templates" in f:
        return "report.py code (grouping, filters)"
    if "/orchestrator/" in f:
        return "other orchestrator code (store, outcomes)"
    if "/encodings/" in f or f.endswith("/codecs.py"):
        return "text decode/encode"
    return "other Python (stdlib: enum, datetime, ...)"


def profile_breakdown(path: Path) -> tuple[float, list[tuple[str, float]], pstats.Stats]:
    stats = pstats.Stats(str(path))
    raw = stats.stats  # type: ignore[attr-defined]
    cats: Counter[str] = Counter()
    for func, (_cc, _nc, tt, _ct, callers) in raw.items():
        cat = _category(func)
        if cat is not None:
            cats[cat] += tt
            continue
        # a builtin: charge its time to the callers' categories
        spread = 0.0
        for caller, value in callers.items():
            share = value[2]
            ccat = _category(caller) or "builtins called from builtins"
            if ccat == "template rendering (Jinja2)" or caller[0].endswith(".j2"):
                ccat = "template rendering (Jinja2)"
            cats[ccat] += share
            spread += share
        if spread < tt:
            cats["builtins (unattributed)"] += tt - spread
    total = stats.total_tt  # type: ignore[attr-defined]
    return total, cats.most_common(), stats


def cumulative_of(stats: pstats.Stats, wanted: list[tuple[str, str]]) -> list[tuple[str, float, int]]:
    out = []
    raw = stats.stats  # type: ignore[attr-defined]
    for suffix, name in wanted:
        for func, (_cc, nc, _tt, ct, _callers) in raw.items():
            if func[0].replace("\\", "/").endswith(suffix) and func[2] == name:
                out.append((f"{suffix.rsplit('/', 1)[-1]}:{name}", ct, nc))
    return out


def index_composition(path: Path) -> list[tuple[str, int, str]]:
    data = path.read_bytes()
    text = data.decode("utf-8", "replace")
    parts: list[tuple[str, int, str]] = [("index.html", len(data), "")]

    def size(s: str) -> int:
        return len(s.encode())

    style = sum(size(m) for m in re.findall(r"<style\b.*?</style>", text, re.S))
    parts.append(("<style> (inline CSS)", style, ""))
    thead = sum(size(m) for m in re.findall(r"<thead\b.*?</thead>", text, re.S))
    parts.append(("<thead> (node headers)", thead, ""))
    tds = re.findall(r"<td\b[^>]*>.*?</td>", text, re.S)
    ths = re.findall(r"<th\b[^>]*>.*?</th>", text, re.S)
    td_text = "".join(tds)
    td_bytes = size(td_text)
    parts.append(
        (
            "<td> cells",
            td_bytes,
            f"{len(tds)} cells, {td_bytes / max(1, len(tds)):.0f} B each on average",
        )
    )
    parts.append(("<th> headers (all)", sum(size(m) for m in ths), f"{len(ths)} <th>"))
    attrs: Counter[str] = Counter()
    for name, value in re.findall(r'\s([\w-]+)="([^"]*)"', td_text):
        attrs[name] += size(f' {name}="{value}"')
    for name, n in attrs.most_common():
        parts.append((f'  in <td>: {name}="..."', n, "attribute incl. name and quotes"))
    small = re.findall(r"<small\b[^>]*>.*?</small>", td_text, re.S)
    parts.append(("  in <td>: <small> notes", sum(size(m) for m in small), f"{len(small)} of them"))
    links = re.findall(r"<a\b[^>]*>.*?</a>", td_text, re.S)
    parts.append(("  in <td>: <a> links (whole element)", sum(size(m) for m in links), f"{len(links)}"))
    ws = sum(size(m) for m in re.findall(r">(\s+)<", text))
    parts.append(("whitespace between tags (whole page)", ws, "newlines and indentation"))
    tags = sum(size(m) for m in re.findall(r"<[^>]+>", text))
    parts.append(("markup: all tags incl. attributes", tags, ""))
    parts.append(("text content (outside tags)", len(data) - tags, ""))
    return parts


# ---------------------------------------------------------------------------


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}"


def report_render(label: str, info: dict) -> None:
    print(
        f"{label}: {info['seconds']:.2f} s wall, {info['cpu_seconds']:.2f} s CPU ({info['sys_seconds']:.2f} s system) "
        f"(load before {info['load_before']:.1f}), index.html {info['index_bytes']:,} B, "
        f"{info['written']:,} files written ({info['files']:,} in the folder), peak RSS "
        f"{info['rss_peak_kb'] / 1024:.0f} MiB (before render {info['rss_before_kb'] / 1024:.0f} MiB)"
    )


def summary(renders: list[dict]) -> dict[str, str]:
    """One column of the results table: min / median of the renders, the last one's files."""
    times = [r["seconds"] for r in renders]
    t_min, t_med = min(times), statistics.median(times)
    last = renders[-1]
    peak = max(r["rss_peak_kb"] for r in renders)
    before = min(r["rss_before_kb"] for r in renders)
    return {
        "time": f"{t_min:.2f} s / {t_med:.2f} s (each: {', '.join(f'{t:.2f}' for t in times)})",
        "cpu": f"{min(r['cpu_seconds'] for r in renders):.2f} s",
        "ratio": f"{t_min / TARGET_SECONDS:.2f}x, {t_med / TARGET_SECONDS:.2f}x",
        "index": f"{last['index_bytes']:,} B ({fmt_bytes(last['index_bytes'])})",
        "index_ratio": f"{last['index_bytes'] / TARGET_INDEX_BYTES:.2f}x",
        "written": f"{last['written']:,}",
        "files": f"{last['files']:,} (" + ", ".join(f"{d}/: {n:,}" for d, n in sorted(last["by_dir"].items())) + ")",
        "bytes": f"{last['bytes']:,} B ({fmt_bytes(last['bytes'])})",
        "largest": ", ".join(f"{p} {fmt_bytes(n)}" for n, p in last["largest"]),
        "rss": f"{peak / 1024:.0f} MiB ({(peak - before) / 1024:.0f} MiB above the {before / 1024:.0f} MiB before)",
    }


def print_phases(name: str, info: dict) -> None:
    wall = info["seconds"]
    print()
    print(
        f"phases of one {name} render (timers on the seams, no profiler: {wall:.2f} s wall, "
        f"{info['cpu_seconds']:.2f} s CPU)"
    )
    timers = info["timers"] or {}
    for label, (calls, secs, nbytes) in sorted(timers.items(), key=lambda x: -x[1][1]):
        out = f", {fmt_bytes(nbytes)} out" if nbytes else ""
        print(f"  {secs:7.2f} s {100 * secs / wall:5.1f} %  {label} ({calls:,} calls{out})")
    queries = sum(v[1] for k, v in timers.items() if k.startswith("query:"))
    model = sum(v[1] for k, v in timers.items() if k.startswith("model:"))
    templates = sum(v[1] for k, v in timers.items() if k.startswith("template:"))
    writes = sum(v[1] for k, v in timers.items() if k.startswith("write:"))
    rest = wall - queries - model - templates - writes
    for label, secs in (
        ("queries (SQL, row loading)", queries),
        ("building the report model (collect), queries excluded", model),
        ("template rendering", templates),
        ("file writing", writes),
        ("the rest (report.py's own code: cell pages, stamps, loops)", rest),
    ):
        print(f"  => {secs:7.2f} s {100 * secs / wall:5.1f} %  {label}")


def table(rows: list[tuple[str, ...]]) -> str:
    """A Markdown table, every column but the last padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("| " + " | ".join([*cells, row[-1]]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--variants", type=int, default=50, help="kernel variants (cells per node)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3, help="timed renders (default 3)")
    parser.add_argument("--seed", type=int, default=84)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="two more renders: one with timers on its phases, one under cProfile",
    )
    parser.add_argument("--keep", type=Path, metavar="DIR", help="build and render in DIR, keep it")
    parser.add_argument("--child-render", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_render:
        child_render(*args.child_render, args.child_profile)
        return 0

    if args.keep:
        work = args.keep.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="farm-report-bench-"))
    db = work / "results.db"
    for stale in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        stale.unlink(missing_ok=True)
    # No folder is deleted until every render is done, an earlier --keep's included (moved
    # aside now, deleted at the end): on ext4 without a journal (this VM's disk) a new inode
    # is not taken from those freed in the last dirty_expire_centisecs (30 s), and each
    # create scans past them, so deleting a render's 3,500 files made the next render's
    # creates 0.1 s -> 1 s+ of system time (see bench/README.md, session 7).
    aside = work / f".stale-{os.getpid()}"
    leftovers = [p for p in work.iterdir() if p.is_dir() and not p.name.startswith(".stale-")]
    if leftovers:
        aside.mkdir()
        for folder in leftovers:
            folder.rename(aside / folder.name)
    try:
        print(f"building {args.nodes} nodes x {args.variants} variants x {args.runs} runs in {db}")
        built = build_database(db, args.nodes, args.variants, args.runs, args.seed)
        print(
            f"built {built['results']:,} result rows in {built['seconds']:.1f} s "
            f"({fmt_bytes(built['db_bytes'])}; {built['flaky_cells']} flaky cells; "
            f"sources changed: {', '.join(built['changed_sources'])})"
        )
        # cold: the first render of a site, into an empty folder; warm: `farm verify`'s
        # render into its kept reports/ after one more run (a copy of a cold render's
        # folder, then the run written into the database). Each in a fresh process.
        colds: list[dict] = []
        for i in range(args.repeat):
            colds.append(render_once(db, work / f"cold-{i + 1}"))
            report_render(f"cold {i + 1}", colds[-1])
        kept = work / "cold-1"
        added = insert_run(db, built["next_run"])
        print(f"added run {built['runs'] + 1} ({len(built['next_run'].get('results', [])):,} results) in {added:.1f} s")
        warms: list[dict] = []
        for i in range(args.repeat):
            warms.append(render_once(db, work / f"warm-{i + 1}", kept=kept))
            report_render(f"warm {i + 1}", warms[-1])
        print()
        print(f"machine: {machine()}")
        print(f"date: {datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}")
        cold, warm = summary(colds), summary(warms)
        rows = [
            ("measure", "cold (empty folder)", "warm (kept folder, one more run)"),
            ("---", "---", "---"),
            (
                "rows / nodes / variants / runs",
                f"{built['results']:,} / {built['nodes']} / {built['variants']} "
                f"({built['kernels']} kernels) / {built['runs']}",
                f"+ {len(built['next_run'].get('results', [])):,} / run {built['runs'] + 1}",
            ),
            ("DB build time", f"{built['seconds']:.1f} s ({fmt_bytes(built['db_bytes'])} file)", f"{added:.1f} s"),
            (f"render time, min / median of {args.repeat}", cold["time"], warm["time"]),
            ("render CPU time (user+sys), min", cold["cpu"], warm["cpu"]),
            ("render time / 2 s target (min, median)", cold["ratio"], warm["ratio"]),
            ("index.html size", cold["index"], warm["index"]),
            ("index.html / 1 MB target", cold["index_ratio"], warm["index_ratio"]),
            ("files written (new or changed)", cold["written"], warm["written"]),
            ("files in the folder", cold["files"], warm["files"]),
            ("total bytes in the folder", cold["bytes"], warm["bytes"]),
            ("largest files", cold["largest"], warm["largest"]),
            ("peak RSS of the render process", cold["rss"], warm["rss"]),
        ]
        print(table(rows))
        verdict = []
        for name, runs_ in (("cold", colds), ("warm", warms)):
            median = statistics.median(r["seconds"] for r in runs_)
            if median > TARGET_SECONDS:
                verdict.append(f"the {name} render misses the 2 s target ({median:.2f} s median)")
            index_bytes = runs_[-1]["index_bytes"]
            if index_bytes > TARGET_INDEX_BYTES:
                verdict.append(f"the {name} index.html misses the 1 MB target ({index_bytes:,} B)")
        print("targets: " + ("; ".join(verdict) if verdict else "all met"))

        if args.profile:
            for name, phases_kept in (("cold", None), ("warm", kept)):
                print_phases(name, render_once(db, work / f"{name}-phases", "phases", kept=phases_kept))

            prof = work / "render.pstats"
            info = render_once(db, work / "render-profile", "profile", prof, kept=kept)
            total, cats, stats = profile_breakdown(prof)
            print()
            print(
                f"cProfile of one warm render ({info['seconds']:.2f} s wall under the profiler, which inflates "
                f"Python-heavy code; {total:.2f} s profiled)"
            )
            for name, secs in cats:
                if secs >= 0.005:
                    print(f"  {secs:7.2f} s {100 * secs / total:5.1f} %  {name}")
            print("  top functions by own time:")
            stats.sort_stats("tottime")
            for func in stats.fcn_list[:20]:  # type: ignore[attr-defined]
                _cc, nc, tt, ct, _ = stats.stats[func]  # type: ignore[attr-defined]
                where = func[0] if func[0] == "~" else "/".join(Path(func[0]).parts[-2:])
                print(f"  {tt:7.2f} s own {ct:7.2f} s cum {nc:9,} calls  {where}:{func[1]} {func[2]}")
            index = Path(info["index"])
            if index.exists():
                print()
                print("index.html composition:")
                for label, n, note in index_composition(index):
                    print(f"  {n:>11,} B  {label}{'  (' + note + ')' if note else ''}")
    finally:
        shutil.rmtree(aside, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
