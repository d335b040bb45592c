"""What a probed node and a finished cell become in the store: the mapping
from the pipeline's objects to the columns of tables.py, in one place."""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.config import inputs
from orchestrator.config.farm import Job
from orchestrator.config.schema import NodeSpec
from orchestrator.outcomes import Outcome
from orchestrator.plan import Cell
from orchestrator.run.bundle import Staging
from orchestrator.run.probe import Gpu, NodeSnapshot
from orchestrator.run.stages import CellResult


def node_address(node: NodeSpec) -> str:
    login = "local" if node.transport == "local" or not node.host else f"{node.user or ''}@{node.host}:{node.port}"
    return f"slurm:{node.partition} via {login}" if node.transport == "slurm" else login


def snapshot_fields(
    name: str,
    node: NodeSpec,
    snapshot: NodeSnapshot | None,
    error: str | None,
    probe_seconds: float | None,
    stage_seconds: float | None,
    shipped: int,
) -> dict[str, Any]:
    s = snapshot
    return {
        "node": name,
        "transport": node.transport,
        "address": node_address(node),
        "hostname": s.hostname if s else None,
        "os": s.os if s else None,
        "gpu_name": s.gpu_name if s else None,
        "cc": str(s.cc) if s and s.cc else None,
        "driver": s.driver if s else None,
        "memory": s.memory if s else None,
        "gpu_count": s.gpu_count if s else 0,
        "nvcc_path": s.nvcc_path if s else node.nvcc,  # a shipped toolchain's path, once it is there
        "nvcc_version": s.nvcc_version if s else None,
        "declared_gpu": node.gpu,
        "declared_cc": node.cc,
        "cc_mismatch": bool(s and s.cc_mismatch),
        "real_gpu": bool(s and s.real_gpu),
        "driver_evidence": s.driver_evidence if s else None,
        "probe_error": error,
        "probe_seconds": probe_seconds,
        "stage_seconds": stage_seconds,
        "bytes_shipped": shipped,
        "smi_output": s.smi_output if s else None,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "cc": str(g.cc),
                "memory": g.memory,
                "verified": g.verified,
                "check": g.check,
            }
            for g in (s.gpus if s else ())
        ],
        "driver_check": s.driver_check if s else None,
    }


def result_fields(
    cell: Cell, job: Job, result: CellResult, staging: Staging | None, device_gpus: list[Gpu]
) -> dict[str, Any]:
    """The row of one finished cell. `staging` is None when the node could not
    be set up (nothing reached it, so no identity); `device_gpus` are the GPUs
    of the cell's card model."""
    variant = job.spec.variants[cell.variant]
    verdict = result.verdict
    assert verdict is not None
    exp = result.expectation
    deps = (
        {
            name: staging.dependencies[name].as_input(name)
            for name in job.spec.dependencies
            if name in staging.dependencies
        }
        if staging is not None
        else {}
    )
    complete = staging is not None and len(deps) == len(job.spec.dependencies)
    gpu = result.gpu
    # the card it ran on; where a transport picked the GPU itself, the model's (all of its GPUs confirmed)
    real = gpu.verified if gpu is not None else bool(device_gpus) and all(g.verified for g in device_gpus)
    cuts = {name: list(scan.cut) for name, scan in (("stdout", result.stdout), ("stderr", result.stderr)) if scan.cut}
    # a figure of speed is evidence only when the kernel's numbers passed: a wrong answer fast is no baseline
    timed = verdict.outcome in (Outcome.PASS, Outcome.PERF_REGRESSION)
    return {
        "kernel": cell.kernel,
        "variant": cell.variant,
        "node": cell.node,
        "device": cell.device,
        "gpu_index": gpu.index if gpu else None,
        "gpu_uuid": gpu.uuid if gpu else None,
        "cc": str(exp.cc) if exp.cc else None,
        "real_gpu": real,
        "contract": str(variant.cc.contract()),
        "contract_ccs": variant.cc.contract().named(),
        "expected": exp.label,
        "contract_expected": exp.outcome.value,
        "expected_reason": exp.reason,
        "known_failure_reason": exp.known_failure.reason if exp.known_failure else None,
        "outcome": verdict.outcome.value,
        "failed_stage": verdict.failed_stage,
        "reason": verdict.reason,
        "exit_code": result.evidence.run_exit,
        "stage_seconds": result.stage_seconds,
        "stage_details": {s.name: {"status": s.status, "detail": s.detail} for s in result.stages},
        "build_key": result.build_key,
        "build_command": result.build_command,
        "build_cached": result.build_cached,
        "build_log": result.build_log,
        "stdout": result.stdout.kept,
        "stderr": result.stderr.kept,
        "stdout_size": result.stdout.size,
        "stderr_size": result.stderr.size,
        "stdout_sha256": result.stdout.sha256 or None,
        "stderr_sha256": result.stderr.sha256 or None,
        "output_cuts": cuts,
        "markers": {"pass": result.evidence.pass_line, "refusal": result.evidence.refusal_line},
        "last_stderr_line": result.evidence.stderr_last_line or None,
        "source_sha256": job.file_sha256[job.main_source],
        "sources": dict(job.file_sha256),
        "dependencies": {
            name: {"digest": d.digest, "version": d.version, "origin": d.origin} for name, d in deps.items()
        },
        "identity": inputs.identity(job.file_sha256, {n: d.digest for n, d in deps.items()}) if complete else None,
        "binary_sha256": result.binary_sha256,
        "instruction_counts": result.instruction_counts,
        "required_instructions": dict(variant.instructions),
        "elf_targets": result.elf_targets,
        "ptx_targets": result.ptx_targets,
        "code_path": result.code_path,
        "slurm_job_id": result.slurm_job_id,
        "compute_node": result.compute_node,
        "sanitizer": [dataclasses.asdict(r) for r in result.evidence.sanitizer] or None,
        "metrics": [m.record() for m in result.evidence.metrics] if timed else [],
        "started_at": result.started_at,
        "ended_at": result.ended_at,
    }
