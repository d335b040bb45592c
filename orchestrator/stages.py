"""The per-cell stages, build -> inspect -> run, each stamped by one wrapper.

(probe and stage run once per node, in executor.py; their records are shared
by the node's cells.) The wrapper records each stage's name, start, duration
and status, and turns an InfraError into "this stage failed for infra reasons":
later stages are then not run. A kernel failing is not an exception: it is
evidence, handed to classify.py, which alone decides the outcome.

Every command the node runs is built here from quoted parts. Each runs under a
remote `timeout -k`, so a kernel that never ends is killed on the node itself
(with its whole process group), not only its SSH channel.
"""

from __future__ import annotations

import hashlib
import queue
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .capability import ComputeCapability
from .classify import Evidence, Verdict, classify
from .config import Job
from .errors import InfraError
from .plan import Cell, Expectation
from .probe import NodeSnapshot
from .schema import VariantSpec
from .transport import Transport

KILL_GRACE = 5  # seconds between TERM and KILL of a timed-out command
CHANNEL_MARGIN = 30.0  # channel timeout beyond the remote timeout
INSPECT_TIMEOUT = 300.0
SASS_LIMIT = 256 << 20  # bytes of disassembly read back for counting


@dataclass
class StageRecord:
    name: str
    status: str  # ok | failed | infra | skipped | cached
    started_at: datetime
    seconds: float
    detail: str = ""


@dataclass
class CellResult:
    """Everything stored about one cell; evidence for classify and the report."""

    cell: Cell
    expectation: Expectation
    verdict: Verdict | None = None
    stages: list[StageRecord] = field(default_factory=list)
    evidence: Evidence = field(default_factory=Evidence)
    build_command: str = ""
    build_log: bytes = b""
    build_cached: bool = False
    stdout_size: int = 0
    stderr_size: int = 0
    binary_sha256: str | None = None
    instruction_counts: dict[str, int] = field(default_factory=dict)
    elf_targets: list[str] = field(default_factory=list)
    ptx_targets: list[str] = field(default_factory=list)
    code_path: str | None = None  # native | ptx-jit | no-code, for the node's CC
    slurm_job_id: str | None = None  # Slurm nodes: the job that ran the kernel (else the cell's last job)
    compute_node: str | None = None  # Slurm nodes: the compute node that job ran on
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended_at: datetime | None = None

    @property
    def stage_seconds(self) -> dict[str, float]:
        return {s.name: round(s.seconds, 3) for s in self.stages}


class GpuSlots:
    """One GPU job at a time per GPU: a pool of device indices."""

    def __init__(self, count: int) -> None:
        self._free: queue.Queue[int] = queue.Queue()
        for index in range(max(count, 1)):
            self._free.put(index)

    def acquire(self) -> int:
        return self._free.get()

    def release(self, index: int) -> None:
        self._free.put(index)


@dataclass(frozen=True)
class CellPaths:
    """Where a cell's bundle, build and run live on its node."""

    sources_dir: str
    dependency_dirs: dict[str, str]
    build_dir: str
    binary: str
    run_dir: str


def cell_paths(
    snapshot: NodeSnapshot,
    job: Job,
    variant: VariantSpec,
    cell: Cell,
    run_id: int,
    sources_dir: str,
    dependency_dirs: dict[str, str],
    dependency_digests: dict[str, str],
) -> CellPaths:
    # The build folder is named by everything that determines the binary, so an
    # unchanged cell reuses it on the next run and nvcc is not invoked at all.
    key_parts = [
        sources_dir,
        *(f"{k}={v}" for k, v in sorted(dependency_digests.items())),
        variant.build,
        snapshot.nvcc_path,
        snapshot.nvcc_version or "",
    ]
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:20]
    # per farm node: two entries naming one machine never build in one folder
    build_dir = f"{snapshot.workdir}/builds/{cell.node}/{cell.kernel}-{cell.variant}-{key}"
    return CellPaths(
        sources_dir=sources_dir,
        dependency_dirs=dependency_dirs,
        build_dir=build_dir,
        binary=f"{build_dir}/{cell.kernel}-{cell.variant}",
        run_dir=f"{snapshot.workdir}/cells/{run_id}-{cell.kernel}-{cell.variant}",
    )


def guarded(command: str, limit: int, redirects: str) -> str:
    """A shell fragment running `command` under `timeout -k`, leaving its exit
    status in $rc, and then killing whatever is left of its process group.

    `timeout` leads its own process group; but when the command's first process
    dies of the TERM and a child that ignores TERM lives on, timeout exits at
    once and never sends the KILL. The group kill afterwards catches that child.
    """
    return (
        f"timeout -k {KILL_GRACE} {limit} sh -c {shlex.quote(command)} {redirects} & pid=$!; "
        f"wait $pid; rc=$?; kill -s KILL -- -$pid 2>/dev/null"
    )


def render_build(job: Job, variant: VariantSpec, snapshot: NodeSnapshot, paths: CellPaths) -> str:
    fields = {
        "nvcc": shlex.quote(snapshot.nvcc_path),
        "binary": shlex.quote(paths.binary),
        "sources": " ".join(shlex.quote(f"{paths.sources_dir}/{s}") for s in job.spec.sources),
        **{name: shlex.quote(path) for name, path in paths.dependency_dirs.items()},
    }
    return variant.build.format(**fields)


def count_instructions(disassembly: str, names: list[str]) -> dict[str, int]:
    """Occurrences of each mnemonic as a whole word ("HMMA" counts HMMA.16816.F32)."""
    return {name: len(re.findall(rf"(?<![\w.]){re.escape(name)}(?!\w)", disassembly)) for name in names}


_ELF_RE = re.compile(r"\bsm_(\d+)([a-z]?)\.cubin")
_PTX_RE = re.compile(r"\bsm_(\d+)([a-z]?)\.ptx")


def code_path_for(cc: ComputeCapability | None, elf: list[str], ptx: list[str]) -> str | None:
    """Which code a device of this CC runs from the binary: its own machine code
    (a cubin for exactly its sm_XY), PTX the driver compiles at load (PTX for an
    older or equal virtual arch), or nothing it can load."""
    if cc is None:
        return None
    target = cc.major * 10 + cc.minor

    def number(arch: str) -> int:
        return int(re.sub(r"\D", "", arch))

    # a cubin for sm_XY runs on X.Z for Z >= Y (same major); an arch-specific one (sm_90a) on X.Y only
    if any(
        number(arch) == target or (not arch.endswith("a") and number(arch) // 10 == cc.major and number(arch) <= target)
        for arch in elf
    ):
        return "native"
    # arch-specific PTX (sm_90a) is not forward compatible; plain PTX is.
    if any(int(re.sub(r"\D", "", arch)) <= target and not arch.endswith("a") for arch in ptx):
        return "ptx-jit"
    return "no-code"


class CellPipeline:
    """Runs build, inspect and run for one cell on an open transport."""

    def __init__(
        self,
        transport: Transport,
        job: Job,
        variant: VariantSpec,
        snapshot: NodeSnapshot,
        paths: CellPaths,
        result: CellResult,
        gpu_slots: GpuSlots,
        output_cap: int,
        cuobjdump: str,
    ) -> None:
        self.t = transport
        self.job = job
        self.variant = variant
        self.snapshot = snapshot
        self.paths = paths
        self.result = result
        self.gpu_slots = gpu_slots
        self.output_cap = output_cap
        self.cuobjdump = cuobjdump

    # one wrapper for every stage -----------------------------------------
    def _stage(self, name: str, action: Callable[[], str]) -> bool:
        started = datetime.now(UTC)
        clock = time.monotonic()
        status = "ok"
        detail = ""
        try:
            status = action()
        except InfraError as err:
            status = "infra"
            detail = str(err)
            job = getattr(err, "job", None)  # a Slurm job that Slurm ended or never started
            if job is not None:
                self.result.slurm_job_id, self.result.compute_node = job.job_id, job.compute_node
            self.result.evidence.infra_stage = name
            self.result.evidence.infra_detail = detail
            self.result.evidence.infra_retryable = err.retryable
        self.result.stages.append(StageRecord(name, status, started, time.monotonic() - clock, detail))
        return status in ("ok", "cached")

    def execute(self) -> CellResult:
        ev = self.result.evidence
        # each stage runs only if the one before it succeeded; a node without a
        # GPU stops after inspect (compile-only)
        built = self._stage("build", self._build) and ev.build_exit == 0
        inspected = built and self._stage("inspect", self._inspect) and self._inspect_passed()
        if inspected and self.snapshot.has_gpu:
            # wait for the GPU outside the stage, so the run's seconds are the kernel's
            slot = self.gpu_slots.acquire()
            try:
                self._stage("run", lambda: self._run(slot))
            finally:
                self.gpu_slots.release(slot)
        self.result.verdict = classify(
            ev, self.result.expectation, self.job.spec.pass_marker, self.job.spec.refusal_marker
        )
        self.result.ended_at = datetime.now(UTC)
        return self.result

    def _note_job(self) -> None:
        """The Slurm job and compute node of the command just run (other transports have none)."""
        if hasattr(self.t, "last_job_id"):
            self.result.slurm_job_id = self.t.last_job_id
            self.result.compute_node = self.t.last_compute_node

    def _inspect_passed(self) -> bool:
        ev = self.result.evidence
        return ev.inspect_exit == 0 and not ev.missing_instructions

    # build ----------------------------------------------------------------
    def _build(self) -> str:
        command = render_build(self.job, self.variant, self.snapshot, self.paths)
        self.result.build_command = command
        bdir = shlex.quote(self.paths.build_dir)
        limit = int(self.job.spec.build_timeout)
        script = (
            f"if [ -f {bdir}/.farm-built ]; then echo cached; exit 0; fi; "
            f"rm -rf {bdir} && mkdir -p {bdir} && cd {bdir} && "
            f"{{ {guarded(command, limit, '> build.log 2>&1 < /dev/null')}; "
            f"if [ $rc -eq 0 ]; then touch .farm-built; fi; echo built; exit $rc; }}"
        )
        outcome = self.t.run(script, timeout=limit + KILL_GRACE + CHANNEL_MARGIN)
        self._note_job()
        self.result.build_cached = outcome.stdout.strip() == "cached"
        self.result.evidence.build_exit = outcome.exit_code
        try:
            self.result.build_log = self.t.read(f"{self.paths.build_dir}/build.log", self.output_cap)
        except FileNotFoundError:
            self.result.build_log = (outcome.stdout + outcome.stderr).encode()
        if outcome.exit_code in (124, 137):
            self.result.build_log += f"\n[farm] build killed at its {limit} s timeout\n".encode()
        if outcome.exit_code != 0:
            return "failed"
        return "cached" if self.result.build_cached else "ok"

    # inspect --------------------------------------------------------------
    def _inspect(self) -> str:
        binary = shlex.quote(self.paths.binary)
        command = self.variant.inspect.format(cuobjdump=shlex.quote(self.cuobjdump), binary=binary)
        bdir = shlex.quote(self.paths.build_dir)
        cuda = "{cuobjdump}" in self.variant.inspect
        lists = (
            f"echo '@@farm elf'; {shlex.quote(self.cuobjdump)} --list-elf {binary} 2>&1; "
            f"echo '@@farm ptx'; {shlex.quote(self.cuobjdump)} --list-ptx {binary} 2>&1; "
            if cuda
            else ""
        )
        script = (
            f"cd {bdir} && {guarded(command, int(INSPECT_TIMEOUT), '> inspect.txt 2> inspect.err < /dev/null')}; "
            f'echo "@@farm rc=$rc"; '
            f"echo '@@farm sha'; sha256sum {binary} | cut -d' ' -f1; {lists}exit 0"
        )
        outcome = self.t.run(script, timeout=INSPECT_TIMEOUT + CHANNEL_MARGIN)
        self._note_job()
        ev = self.result.evidence
        text = outcome.stdout
        rc = re.search(r"@@farm rc=(\d+)", text)
        ev.inspect_exit = int(rc.group(1)) if rc else 255
        sha = re.search(r"@@farm sha\n([0-9a-f]{64})", text)
        self.result.binary_sha256 = sha.group(1) if sha else None
        if cuda:
            elf_part = text.split("@@farm elf", 1)[-1].split("@@farm ptx", 1)[0]
            ptx_part = text.split("@@farm ptx", 1)[-1]
            self.result.elf_targets = sorted({f"sm_{a}{s}" for a, s in _ELF_RE.findall(elf_part)})
            self.result.ptx_targets = sorted({f"sm_{a}{s}" for a, s in _PTX_RE.findall(ptx_part)})
            self.result.code_path = code_path_for(self.snapshot.cc, self.result.elf_targets, self.result.ptx_targets)
        if ev.inspect_exit != 0:
            return "failed"
        dump = self.t.read(f"{self.paths.build_dir}/inspect.txt", SASS_LIMIT).decode("utf-8", "replace")
        counts = count_instructions(dump, list(self.variant.instructions))
        self.result.instruction_counts = counts
        ev.missing_instructions = {
            name: (counts[name], needed) for name, needed in self.variant.instructions.items() if counts[name] < needed
        }
        return "failed" if ev.missing_instructions else "ok"

    # run ------------------------------------------------------------------
    def _run(self, slot: int) -> str:
        limit = int(self.variant.timeout or self.job.spec.timeout)
        command = self.variant.run.format(binary=shlex.quote(self.paths.binary))
        rdir = shlex.quote(self.paths.run_dir)
        # a Slurm job asked for a GPU runs on the one Slurm gave it (its CUDA_VISIBLE_DEVICES)
        pin = "" if getattr(self.t, "allocates_gpus", False) else f"export CUDA_VISIBLE_DEVICES={slot}; "
        script = (
            f"mkdir -p {rdir} && cd {rdir} && {{ {pin}"
            f"{guarded(command, limit, '> stdout 2> stderr < /dev/null')}; "
            f'echo "@@farm $rc $(wc -c < stdout) $(wc -c < stderr)"; }}'
        )
        clock = time.monotonic()
        outcome = self.t.run(script, timeout=limit + KILL_GRACE + CHANNEL_MARGIN)
        elapsed = time.monotonic() - clock
        self._note_job()  # the kernel's job, before the clean-up job below
        match = re.search(r"@@farm (\d+) (\d+) (\d+)", outcome.stdout)
        if not match:
            raise InfraError(
                f"node {self.t.name!r}: the run wrapper printed no status "
                f"({(outcome.stderr or outcome.stdout).strip()[-300:]!r})"
            )
        ev = self.result.evidence
        ev.run_exit = int(match.group(1))
        self.result.stdout_size = int(match.group(2))
        self.result.stderr_size = int(match.group(3))
        ev.run_timed_out = ev.run_exit in (124, 137) and elapsed >= limit * 0.98
        ev.stdout = self.t.read(f"{self.paths.run_dir}/stdout", self.output_cap)
        ev.stderr = self.t.read(f"{self.paths.run_dir}/stderr", self.output_cap)
        self.t.run(f"rm -rf {rdir}", timeout=60)
        return "ok" if ev.run_exit == 0 else "failed"
