"""What a probed node and a finished cell become in the store: the mapping
from the pipeline's objects to the columns of tables.py, in one place."""

from __future__ import annotations

from typing import Any

from .config import Job
from .plan import Cell
from .probe import NodeSnapshot
from .schema import NodeSpec
from .stages import CellResult


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
        "nvcc_path": node.nvcc,
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
    }


def result_fields(cell: Cell, job: Job, result: CellResult) -> dict[str, Any]:
    variant = job.spec.variants[cell.variant]
    verdict = result.verdict
    assert verdict is not None
    exp = result.expectation
    return {
        "kernel": cell.kernel,
        "variant": cell.variant,
        "node": cell.node,
        "contract": str(variant.cc.contract()),
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
        "build_command": result.build_command,
        "build_cached": result.build_cached,
        "build_log": result.build_log,
        "stdout": result.evidence.stdout,
        "stderr": result.evidence.stderr,
        "stdout_size": result.stdout_size,
        "stderr_size": result.stderr_size,
        "source_sha256": next(iter(job.source_sha256.values())),
        "sources": dict(job.source_sha256),
        "binary_sha256": result.binary_sha256,
        "instruction_counts": result.instruction_counts,
        "required_instructions": dict(variant.instructions),
        "elf_targets": result.elf_targets,
        "ptx_targets": result.ptx_targets,
        "code_path": result.code_path,
        "slurm_job_id": result.slurm_job_id,
        "compute_node": result.compute_node,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
    }
