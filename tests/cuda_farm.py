"""One farm run of CUDA code built by the real nvcc, on a node whose cards are stand-ins.

The stand-in kernel's source (tests/standin/standin.cpp: its gate, its PASS line) and the test's CUDA
kernels go into one nvcc-built binary: its host code behaves as a gated kernel, its device code is
what the inspect stage reads. Shared by the rounds on machine-code evidence (58, 63, the JIT compile)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes import SshNode, standin_job

from orchestrator.config.farm import load_farm
from orchestrator.plan import plan_cells
from orchestrator.progress import PlainListener
from orchestrator.report.model import collect
from orchestrator.run import RunSummary, run_cells
from orchestrator.store import Store

STANDIN = Path(__file__).parent / "standin" / "standin.cpp"


def cuda_farm_run(
    node: SshNode,
    root: Path,
    make_farm: Callable[..., Path],
    key: str,
    kernel: str,
    variants: dict[str, dict[str, Any]],
    device_code: str,
    cuobjdump: str,
    lines: io.StringIO | None = None,
    runner: str | None = None,
) -> tuple[RunSummary, Any]:
    """The run's summary and its report model, `kernel`'s variants run on `node` (farm.yaml's node
    `key`; stopped after);
    `lines`: the run's terminal lines, the verdict line among them; `runner`: the node's runner for a
    module's fixture run once per runner ("resident": the resident python runner, `auto`; "shell")."""
    try:
        entry = node.farm_entry(root / "work", cuobjdump=cuobjdump)
        if runner is not None:
            entry["runner"] = "auto" if runner == "resident" else runner
        config = make_farm(root, {key: entry}, [standin_job(kernel, variants, sources=[f"kernels/{kernel}.cu"])])
        (root / "kernels" / f"{kernel}.cu").write_text("#define MODE_PASS\n" + STANDIN.read_text() + device_code)
        farm = load_farm(config)
        store = Store(farm.database_url)
        try:
            listener = PlainListener(lines if lines is not None else io.StringIO(), verdict=lines is not None)
            summary = run_cells(farm, store, plan_cells(farm, None), listener=listener)
            return summary, collect(store, summary.run_id, farm)
        finally:
            store.close()
    finally:
        node.stop()
