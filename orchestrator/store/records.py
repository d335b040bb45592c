"""What a probed node, a finished cell and a try become in the store: typed
records, one frozen dataclass per table a run writes, one field per stored
column, and the functions that build them from the pipeline's objects.

The store's writes take these records, never loose keyword dicts: a misspelt
column is a TypeError where the record is built, not a NULL in the database or
a worker's pickled call failing in the parent. Each record names its table and
the columns the store fills itself (ids, an attempt's time);
tests/test_records.py holds every record against its table (names, NULLs,
defaults, Python types), so a column added to tables.py without a field, or a
field without a column, fails there. Records pickle, so a worker process
forwards them to the parent's store as they are (workers.py STORE_CALLS).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from orchestrator.config import inputs
from orchestrator.cuda_waiver import stored_waiver
from orchestrator.farm_writable import farm_writable
from orchestrator.outcomes import Outcome
from orchestrator.store.tables import Attempt, Base, NodeSnapshotRow, ResultRow

if TYPE_CHECKING:  # the pipeline's objects, read here; the store imports this module without them
    from orchestrator.classify import Verdict
    from orchestrator.config.farm_spec import NodeSpec
    from orchestrator.config.jobs import Job
    from orchestrator.plan import Cell, Expectation
    from orchestrator.run.cell import CellResult
    from orchestrator.run.snapshot import Gpu, NodeSnapshot
    from orchestrator.run.staging import Staging


@functools.cache
def _names(record_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(record_type))


class _Record:
    """What the store reads of every record: its table, and its columns as a row."""

    __slots__ = ()
    TABLE: ClassVar[type[Base]]
    STAMPED: ClassVar[frozenset[str]]  # columns the database or the store fills, never the record

    def columns(self) -> dict[str, Any]:
        """column -> value, as the store inserts and journals it (shallow: bytes and
        JSON values are shared, not copied)."""
        return {name: getattr(self, name) for name in _names(type(self))}


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRecord(_Record):
    """A node as its probe found it, once per run (tables.py NodeSnapshotRow)."""

    TABLE: ClassVar[type[Base]] = NodeSnapshotRow
    STAMPED: ClassVar[frozenset[str]] = frozenset({"id"})

    run_id: int
    node: str
    transport: str
    address: str
    hostname: str | None = None
    os: str | None = None
    gpu_name: str | None = None
    cc: str | None = None
    driver: str | None = None
    memory: str | None = None
    gpu_count: int = 0
    nvcc_path: str | None = None
    nvcc_version: str | None = None
    declared_gpu: str | None = None
    declared_cc: str | None = None
    cc_mismatch: bool = False
    real_gpu: bool = False
    driver_evidence: str | None = None
    probe_error: str | None = None
    probe_seconds: float | None = None
    stage_seconds: float | None = None
    bytes_shipped: int = 0
    smi_output: str | None = None
    # [{index, uuid, name, cc, memory, verified, check}]; the column is NULL only in rows older than 0004
    gpus: list[dict[str, Any]] | None = field(default_factory=list)
    driver_check: str | None = None
    runner: str | None = None  # who ran the cells' stages: "python3 PATH" (noderunner.py) or "shell"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultRecord(_Record):
    """One finished cell (tables.py ResultRow; the columns are described there)."""

    TABLE: ClassVar[type[Base]] = ResultRow
    STAMPED: ClassVar[frozenset[str]] = frozenset({"id"})

    run_id: int
    snapshot_id: int | None = None  # None: no snapshot of its node was stored
    kernel: str
    variant: str
    node: str
    device: str = ""
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    cc: str | None = None
    real_gpu: bool = False
    farm_writable: bool = False  # ran unconfined on a local node: certifies nothing (farm_writable.py)
    contract: str
    contract_ccs: list[str] | None = None
    expected: str
    contract_expected: str
    expected_reason: str
    cuda_waived: bool = False
    known_failure_reason: str | None = None
    outcome: str
    failed_stage: str | None = None
    reason: str
    exit_code: int | None = None
    stage_seconds: dict[str, float]
    stage_details: dict[str, Any]
    build_command: str
    build_cached: bool = False
    build_log: bytes
    stdout: bytes
    stderr: bytes
    stdout_size: int = 0
    stderr_size: int = 0
    stdout_sha256: str | None = None
    stderr_sha256: str | None = None
    # these three are NULL only in rows older than 0004 (the columns are as 0004 made them)
    output_cuts: dict[str, list[int]] | None = field(default_factory=dict)
    markers: dict[str, int | None] | None = field(default_factory=dict)
    last_stderr_line: str | None = None
    source_sha256: str
    sources: dict[str, str]
    dependencies: dict[str, dict[str, Any]] | None = field(default_factory=dict)
    identity: str | None = None
    build_key: str | None = None
    binary_sha256: str | None = None
    instruction_counts: dict[str, int]
    required_instructions: dict[str, int]
    elf_targets: list[str]
    ptx_targets: list[str]
    code_path: str | None = None
    slurm_job_id: str | None = None
    compute_node: str | None = None
    sanitizer: list[dict[str, Any]] | None = None
    started_at: datetime
    ended_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord(_Record):
    """One try at a node's setup (no kernel) or at a cell (tables.py Attempt);
    the store stamps its time as it writes it."""

    TABLE: ClassVar[type[Base]] = Attempt
    STAMPED: ClassVar[frozenset[str]] = frozenset({"id", "at"})

    run_id: int
    node: str
    kernel: str | None = None
    variant: str | None = None
    attempt: int
    status: str  # ok | infra | skipped
    stage: str | None = None
    error: str | None = None


RECORDS: tuple[type[_Record], ...] = (SnapshotRecord, ResultRecord, AttemptRecord)


def node_address(node: NodeSpec) -> str:
    login = "local" if node.transport == "local" or not node.host else f"{node.user or ''}@{node.host}:{node.port}"
    return f"slurm:{node.partition} via {login}" if node.transport == "slurm" else login


def snapshot_record(
    run_id: int,
    name: str,
    node: NodeSpec,
    snapshot: NodeSnapshot | None,
    error: str | None,
    probe_seconds: float | None,
    stage_seconds: float | None,
    shipped: int,
) -> SnapshotRecord:
    s = snapshot
    return SnapshotRecord(
        run_id=run_id,
        node=name,
        transport=node.transport,
        address=node_address(node),
        hostname=s.hostname if s else None,
        os=s.os if s else None,
        gpu_name=s.gpu_name if s else None,
        cc=str(s.cc) if s and s.cc else None,
        driver=s.driver if s else None,
        memory=s.memory if s else None,
        gpu_count=s.gpu_count if s else 0,
        nvcc_path=s.nvcc_path if s else node.nvcc,  # a shipped toolchain's path, once it is there
        nvcc_version=s.nvcc_version if s else None,
        declared_gpu=node.gpu,
        declared_cc=node.cc,
        cc_mismatch=bool(s and s.cc_mismatch),
        real_gpu=bool(s and s.real_gpu),
        driver_evidence=s.driver_evidence if s else None,
        probe_error=error,
        probe_seconds=probe_seconds,
        stage_seconds=stage_seconds,
        bytes_shipped=shipped,
        smi_output=s.smi_output if s else None,
        gpus=[
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
        driver_check=s.driver_check if s else None,
        runner=s.runner_label(node) if s else None,
    )


def card_confirmed(gpu: Gpu | None, device_gpus: list[Gpu]) -> bool:
    """Whether a cell ran on a card the driver confirmed (results.real_gpu): the card it ran on;
    where a transport picked the GPU itself, the model's (all of its GPUs confirmed). Its speed
    baseline is values of the same kind of card (Store.metric_baseline)."""
    return gpu.verified if gpu is not None else bool(device_gpus) and all(g.verified for g in device_gpus)


def declared_reasons(exp: Expectation, verdict: Verdict) -> str | None:
    """The declared known failures a result names: the one its known failure matched, `fixed`'s every
    one; any other outcome, every one that covers the cell. The job's first alone was stored, and the
    cell page's "Known failure declared" named a build failure over the wrong numbers it matched."""
    said = verdict.declared or exp.known_failures
    return "; ".join(kf.reason for kf in said) or None


def result_record(
    run_id: int,
    snapshot_id: int | None,
    cell: Cell,
    job: Job,
    result: CellResult,
    staging: Staging | None,
    device_gpus: list[Gpu],
    transport: str = "",
) -> ResultRecord:
    """The row of one finished cell. `staging` is None when the node could not
    be set up (nothing reached it, so no identity); `device_gpus` are the GPUs
    of the cell's card model; `transport` the node's (farm_writable.py)."""
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
    real = card_confirmed(gpu, device_gpus)
    cuts = {name: list(scan.cut) for name, scan in (("stdout", result.stdout), ("stderr", result.stderr)) if scan.cut}
    if result.build_log_cut:  # with the log's whole size: no column holds it (file_ends.py)
        cuts["build_log"] = list(result.build_log_cut)
    return ResultRecord(
        run_id=run_id,
        snapshot_id=snapshot_id,
        kernel=cell.kernel,
        variant=cell.variant,
        node=cell.node,
        device=cell.device,
        gpu_index=gpu.index if gpu else None,
        gpu_uuid=gpu.uuid if gpu else None,
        cc=str(exp.cc) if exp.cc else None,
        real_gpu=real,
        farm_writable=farm_writable(transport, result.ran_unconfined),
        contract=str(variant.cc.contract()),
        contract_ccs=variant.cc.contract().named(),
        expected=exp.label,
        contract_expected=exp.outcome.value,
        expected_reason=exp.reason,
        cuda_waived=stored_waiver(exp, verdict.outcome),  # the expectation's flag, never its words
        known_failure_reason=declared_reasons(exp, verdict),
        outcome=verdict.outcome.value,
        failed_stage=verdict.failed_stage,
        reason=verdict.reason,
        exit_code=result.evidence.run_exit,
        stage_seconds=result.stage_seconds,
        stage_details={s.name: {"status": s.status, "detail": s.detail} for s in result.stages},
        build_key=result.build_key,
        build_command=result.build_command,
        build_cached=result.build_cached,
        build_log=result.build_log,
        stdout=result.stdout.kept,
        stderr=result.stderr.kept,
        stdout_size=result.stdout.size,
        stderr_size=result.stderr.size,
        stdout_sha256=result.stdout.sha256 or None,
        stderr_sha256=result.stderr.sha256 or None,
        output_cuts=cuts,
        markers={"pass": result.evidence.pass_line, "refusal": result.evidence.refusal_line},
        last_stderr_line=result.evidence.stderr_last_line or None,
        source_sha256=job.file_sha256[job.main_source],
        sources=dict(job.file_sha256),
        dependencies={name: {"digest": d.digest, "version": d.version, "origin": d.origin} for name, d in deps.items()},
        identity=inputs.identity(job.file_sha256, {n: d.digest for n, d in deps.items()}, job.spec.sources)
        if complete
        else None,
        binary_sha256=result.binary_sha256,
        instruction_counts=result.instruction_counts,
        required_instructions=dict(variant.instructions),
        elf_targets=result.elf_targets,
        ptx_targets=result.ptx_targets,
        code_path=result.code_path,
        slurm_job_id=result.slurm_job_id,
        compute_node=result.compute_node,
        sanitizer=[dataclasses.asdict(r) for r in result.evidence.sanitizer] or None,
        started_at=result.started_at,
        ended_at=result.ended_at,
    )


def result_metrics(result: CellResult) -> list[dict[str, Any]]:
    """The cell's metric values (metrics.Measured.record), stored with its result.
    A figure of speed is evidence only when the kernel's numbers passed: a wrong
    answer fast is no baseline."""
    assert result.verdict is not None
    if result.verdict.outcome not in (Outcome.PASS, Outcome.PERF_REGRESSION):
        return []
    return [m.record() for m in result.evidence.metrics]


def attempt_record(
    run_id: int, node: str, cell: Cell | None, attempt: int, status: str, stage: str | None, error: str | None
) -> AttemptRecord:
    """A try at `cell` on `node`, or at the node's setup (`cell` None)."""
    return AttemptRecord(
        run_id=run_id,
        node=node,
        kernel=cell.kernel if cell else None,
        variant=cell.variant if cell else None,
        attempt=attempt,
        status=status,
        stage=stage,
        error=error,
    )
