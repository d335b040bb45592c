"""The results database's tables, as SQLAlchemy ORM models.

Changing a table means a new Alembic revision in orchestrator/store/migrations/versions/
(`alembic -c orchestrator/store/migrations/alembic.ini revision --autogenerate`):
databases already written are upgraded in place when the store opens them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


# Ids and the measured numbers that pass 2**31 (bytes shipped, an instruction count): PostgreSQL's
# INTEGER is 32 bits, and such a value had been cut to 2147483647 (red-team 242); SQLite's INTEGER is
# 64 bits already, and only "INTEGER PRIMARY KEY" numbers its rows itself, so it keeps its INTEGER (0018)
Wide = BigInteger().with_variant(Integer, "sqlite")


class Meta(Base):
    __tablename__ = "farm_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


# farm_meta's `database_id`: a random id written with the database's first run (or import), so a
# site tells the database it was rendered from from a fresh one in its place (report/site_identity.py).
# Never in a journal: a database rebuilt by `farm import` is another database, its ids its own
SEED_DATABASE_ID = text(
    "INSERT INTO farm_meta (key, value) SELECT 'database_id', :id "
    "WHERE NOT EXISTS (SELECT 1 FROM farm_meta WHERE key = 'database_id')"
)


class SourceFile(Base):
    """A kernel source's or header's exact bytes, once per sha256: certificates are
    about bytes, so the ledger can read a certified source's header even after it changed."""

    __tablename__ = "source_files"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Wide, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    status: Mapped[str] = mapped_column(String(16))  # running | finished | aborted
    trigger: Mapped[str] = mapped_column(String(32))
    farm_commit: Mapped[str | None] = mapped_column(String(64), nullable=True)
    farm_version: Mapped[str] = mapped_column(String(32))
    host: Mapped[str] = mapped_column(String(255))
    config_file: Mapped[str] = mapped_column(Text)
    selection: Mapped[str] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # FARM_RUN on the nodes, and the journal's name (0005); None for runs before it
    token: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    # the environment every process of its cells ran with (scheduler.CELL_ENV, 0012): a metric's
    # values judge only values measured under the same one; None for runs before it
    cell_env: Mapped[str | None] = mapped_column(Text, nullable=True)
    snapshots: Mapped[list[NodeSnapshotRow]] = relationship(back_populates="run")
    results: Mapped[list[ResultRow]] = relationship(back_populates="run")


class NodeSnapshotRow(Base):
    __tablename__ = "node_snapshots"
    id: Mapped[int] = mapped_column(Wide, primary_key=True)
    run_id: Mapped[int] = mapped_column(Wide, ForeignKey("runs.id"), index=True)
    node: Mapped[str] = mapped_column(String(64))
    transport: Mapped[str] = mapped_column(String(16))
    address: Mapped[str] = mapped_column(String(255))
    hostname: Mapped[str | None] = mapped_column(String(255), nullable=True)
    os: Mapped[str | None] = mapped_column(String(255), nullable=True)
    gpu_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    cc: Mapped[str | None] = mapped_column(String(8), nullable=True)
    driver: Mapped[str | None] = mapped_column(String(64), nullable=True)
    memory: Mapped[str | None] = mapped_column(String(64), nullable=True)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    nvcc_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    nvcc_version: Mapped[str | None] = mapped_column(String(32), nullable=True)
    declared_gpu: Mapped[str | None] = mapped_column(String(255), nullable=True)
    declared_cc: Mapped[str | None] = mapped_column(String(8), nullable=True)
    cc_mismatch: Mapped[bool] = mapped_column(Boolean, default=False)
    real_gpu: Mapped[bool] = mapped_column(Boolean, default=False)  # can certify (see run/driver_check.py)
    driver_evidence: Mapped[str | None] = mapped_column(Text, nullable=True)
    probe_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    probe_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    stage_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    bytes_shipped: Mapped[int] = mapped_column(Wide, default=0)
    smi_output: Mapped[str | None] = mapped_column(Text, nullable=True)
    # every usable GPU: [{index, uuid, name, cc, memory, verified, check}] (0004)
    # nullable as migration 0004 added it: a new database is made from these models (engine.migrate)
    gpus: Mapped[list[Any]] = mapped_column(JSON, default=list, nullable=True)
    driver_check: Mapped[str | None] = mapped_column(Text, nullable=True)  # nvidia-smi vs the driver, in words
    runner: Mapped[str | None] = mapped_column(Text, nullable=True)  # "python3 PATH" or "shell" (0010)
    run: Mapped[Run] = relationship(back_populates="snapshots")


class ResultRow(Base):
    __tablename__ = "results"
    # The report's reads (0006), each answered from an index alone, never from the
    # wide rows (logs are stored inline): a cell's results in run order (the
    # fleet's standing, a result's previous ones), a run's cells (its matrix,
    # counts), and the certifying passes per kernel, identity and CC (the ledger).
    __table_args__ = (
        Index("ix_results_cell", "kernel", "variant", "node", "device", "run_id", "outcome"),
        # 0014: real_gpu too, so a run's unconfirmed results (no page paints them green) need no wide row
        # 0016: farm_writable too (as unconfirmed, for the same reads: report.model.unconfirmed); 0017: identity
        Index(
            "ix_results_run_cell",
            *("run_id", "kernel", "variant", "node", "device", "outcome", "real_gpu", "farm_writable", "identity"),
        ),
        Index(
            "ix_results_certifying",
            "outcome",
            "contract_expected",
            "real_gpu",
            "farm_writable",  # 0016: a pass that ran unconfined on the farm's own machine certifies nothing
            "kernel",
            "identity",
            "cc",
            "started_at",
            "run_id",  # 0013: only finished runs certify
        ),
    )
    id: Mapped[int] = mapped_column(Wide, primary_key=True)
    run_id: Mapped[int] = mapped_column(Wide, ForeignKey("runs.id"), index=True)
    snapshot_id: Mapped[int | None] = mapped_column(Wide, ForeignKey("node_snapshots.id"), nullable=True)
    kernel: Mapped[str] = mapped_column(String(64), index=True)
    variant: Mapped[str] = mapped_column(String(64))
    node: Mapped[str] = mapped_column(String(64), index=True)
    # the card model ("" without a GPU) (0004; its server default, as 0004 made it)
    device: Mapped[str] = mapped_column(String(255), default="", server_default="")
    gpu_index: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the GPU it ran on
    gpu_uuid: Mapped[str | None] = mapped_column(String(64), nullable=True)
    cc: Mapped[str | None] = mapped_column(String(8), nullable=True)  # the card's CC it was judged against
    # that card confirmed by the driver
    real_gpu: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # its code ran unconfined on a `local` node, as the farm's user who can write this database:
    # it certifies nothing (farm_writable.py, 0016)
    farm_writable: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    contract: Mapped[str] = mapped_column(String(64))
    contract_ccs: Mapped[list | None] = mapped_column(JSON, nullable=True)  # the CCs it names, e.g. ["7.5"]
    expected: Mapped[str] = mapped_column(String(32))  # known-failure when one is declared
    contract_expected: Mapped[str] = mapped_column(String(32))  # what the contract alone says
    expected_reason: Mapped[str] = mapped_column(Text)
    # judged with the CUDA-error rule waived (`cuda_error_text: expected`), a pass (cuda_waiver.py):
    # typed, not read from NOTE in expected_reason (0015, which filled it for earlier rows)
    cuda_waived: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    known_failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    outcome: Mapped[str] = mapped_column(String(32), index=True)
    failed_stage: Mapped[str | None] = mapped_column(String(16), nullable=True)
    reason: Mapped[str] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stage_seconds: Mapped[dict[str, Any]] = mapped_column(JSON)
    stage_details: Mapped[dict[str, Any]] = mapped_column(JSON)
    build_command: Mapped[str] = mapped_column(Text)
    build_cached: Mapped[bool] = mapped_column(Boolean, default=False)
    build_log: Mapped[bytes] = mapped_column(LargeBinary)
    stdout: Mapped[bytes] = mapped_column(LargeBinary)
    stderr: Mapped[bytes] = mapped_column(LargeBinary)
    stdout_size: Mapped[int] = mapped_column(Wide, default=0)
    stderr_size: Mapped[int] = mapped_column(Wide, default=0)
    # the whole streams' sha256, where the kept copies were cut ({stream: [start, end]}), and
    # the stdout/stderr lines where the markers were found ({"pass": n, "refusal": n}) (0004)
    stdout_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    stderr_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    output_cuts: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, nullable=True)  # nullable as 0004 made it
    markers: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, nullable=True)
    last_stderr_line: Mapped[str | None] = mapped_column(Text, nullable=True)  # the kernel's own last words
    source_sha256: Mapped[str] = mapped_column(String(64))  # the job's first source (its claims' file)
    sources: Mapped[dict[str, Any]] = mapped_column(JSON)  # every source and header shipped: path -> sha256
    # every dependency: name -> {digest, version, origin} (0004)
    dependencies: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, nullable=True)  # as 0004 made it
    # the certificate identity: one sha256 over sources, headers and dependencies (inputs.py); None
    # for results stored before the farm hashed every input (0004)
    identity: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    build_key: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the build folder's key
    binary_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    instruction_counts: Mapped[dict[str, Any]] = mapped_column(JSON)
    required_instructions: Mapped[dict[str, Any]] = mapped_column(JSON)
    elf_targets: Mapped[list[Any]] = mapped_column(JSON)
    ptx_targets: Mapped[list[Any]] = mapped_column(JSON)
    code_path: Mapped[str | None] = mapped_column(String(16), nullable=True)
    slurm_job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # Slurm nodes: the kernel's job
    compute_node: Mapped[str | None] = mapped_column(String(255), nullable=True)  # Slurm nodes: where it ran
    # each compute-sanitizer tool the variant asked for: [{tool, exit_code, errors, findings, timed_out}] (0009)
    sanitizer: Mapped[list | None] = mapped_column(JSON, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    run: Mapped[Run] = relationship(back_populates="results")
    snapshot: Mapped[NodeSnapshotRow | None] = relationship()


class PlannedCell(Base):
    """The cells a run set out to do, so a run killed half-way can later report
    the ones it never finished as not-run."""

    __tablename__ = "planned_cells"
    id: Mapped[int] = mapped_column(Wide, primary_key=True)
    run_id: Mapped[int] = mapped_column(Wide, ForeignKey("runs.id"), index=True)
    kernel: Mapped[str] = mapped_column(String(64))
    variant: Mapped[str] = mapped_column(String(64))
    node: Mapped[str] = mapped_column(String(64))
    device: Mapped[str] = mapped_column(String(255), default="", server_default="")  # (0004)


class Attempt(Base):
    """Every try at a node or a cell, with its node: infra retries stay visible
    (and a flaky node can be blamed) even when a later try succeeded."""

    __tablename__ = "attempts"
    id: Mapped[int] = mapped_column(Wide, primary_key=True)
    run_id: Mapped[int] = mapped_column(Wide, ForeignKey("runs.id"), index=True)
    node: Mapped[str] = mapped_column(String(64))
    kernel: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: node setup
    variant: Mapped[str | None] = mapped_column(String(64), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # ok | infra | skipped
    stage: Mapped[str | None] = mapped_column(String(16), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class MetricValue(Base):
    """A figure of speed of one result (metrics.py), or its absence (`value` None,
    `note` says why), with the baseline it was judged against: written with the
    result, for passing cells only. The cell's key is repeated from its result so
    that a baseline and a kernel page's trends are read from an index alone (0008)."""

    __tablename__ = "metric_values"
    __table_args__ = (
        Index("ix_metric_values_cell", "kernel", "variant", "node", "device", "name", "result_id", "value"),
        Index("ix_metric_values_run", "run_id", "kernel"),
    )
    id: Mapped[int] = mapped_column(Wide, primary_key=True)
    result_id: Mapped[int] = mapped_column(Wide, ForeignKey("results.id"), index=True)
    run_id: Mapped[int] = mapped_column(Wide)
    kernel: Mapped[str] = mapped_column(String(64))
    variant: Mapped[str] = mapped_column(String(64))
    node: Mapped[str] = mapped_column(String(64))
    device: Mapped[str] = mapped_column(String(255), default="")
    name: Mapped[str] = mapped_column(String(64))
    value: Mapped[float | None] = mapped_column(Float, nullable=True)  # finite; None: no value
    unit: Mapped[str] = mapped_column(String(32))
    better: Mapped[str] = mapped_column(String(8))  # higher | lower
    tolerance: Mapped[float] = mapped_column(Float)
    note: Mapped[str] = mapped_column(Text)  # where the value came from, or why there is none
    baseline: Mapped[float | None] = mapped_column(Float, nullable=True)  # the median it was judged against
    regressed: Mapped[bool] = mapped_column(Boolean, default=False)


class SassCount(Base):
    """A result's count of one instruction it was inspected for, with its inputs'
    identity: "what changed" compares a cell's counts with its previous result's
    without reading the wide results rows. Derived from results.instruction_counts
    when the result is written (and once, for earlier results, by 0008)."""

    __tablename__ = "sass_counts"
    id: Mapped[int] = mapped_column(Wide, primary_key=True)
    result_id: Mapped[int] = mapped_column(Wide, ForeignKey("results.id"), index=True)
    identity: Mapped[str | None] = mapped_column(String(64), nullable=True)
    instruction: Mapped[str] = mapped_column(Text)  # a mnemonic the job names (any length)
    count: Mapped[int] = mapped_column(Wide)
