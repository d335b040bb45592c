"""One cell on its node: where its inputs, build and run live (CellPaths), and
what its stages yield (StageRecord, CellResult: the evidence classify reads and
the store keeps)."""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orchestrator.classify import Evidence, Verdict
from orchestrator.config.job_spec import VariantSpec
from orchestrator.plan import Cell, Expectation
from orchestrator.run.bundle import Placed
from orchestrator.run.removal import remove_sh
from orchestrator.run.snapshot import Gpu, NodeSnapshot
from orchestrator.run.streams import ScanResult


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
    build_key: str | None = None
    build_command: str = ""
    build_log: bytes = b""
    build_log_cut: tuple[int, int, int] | None = None  # bytes [start, end) of its size left out (file_ends.py)
    build_cached: bool = False
    stdout: ScanResult = field(default_factory=ScanResult)
    stderr: ScanResult = field(default_factory=ScanResult)
    binary_sha256: str | None = None
    instruction_counts: dict[str, int] = field(default_factory=dict)
    elf_targets: list[str] = field(default_factory=list)
    ptx_targets: list[str] = field(default_factory=list)
    code_path: str | None = None  # native | ptx-jit | no-code, for the GPU's CC
    gpu: Gpu | None = None  # the GPU the kernel ran on (its slot)
    # a stage ran the cell's code unconfined (base._note_confinement): on a `local` node it could write
    # results.db as the farm's user, so its pass certifies nothing (farm_writable.py)
    ran_unconfined: bool = False
    # ran_unconfined on a `local` node, as stored (records.result_record): the run's lines say it (progress.py)
    farm_writable: bool = False
    leftover: int = 0  # processes the kernel left running (daemons, other groups), killed after it
    slurm_job_id: str | None = None  # Slurm nodes: the job that ran the kernel (else the cell's last job)
    compute_node: str | None = None  # Slurm nodes: the compute node that job ran on
    run_seconds: float | None = None  # the kernel's own time on the node (metrics without a regex)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended_at: datetime | None = None

    @property
    def stage_seconds(self) -> dict[str, float]:
        return {s.name: round(s.seconds, 3) for s in self.stages}


@dataclass(frozen=True)
class CellPaths:
    """Where a cell's inputs, build and run live on its node."""

    sources: Placed
    dependencies: dict[str, Placed]
    build_key: str
    build_dir: str
    binary: str
    run_dir: str
    toolchain: Placed | None = None  # the column's CUDA toolkit where the farm shipped it (its nvcc builds)

    @property
    def binary_name(self) -> str:
        return self.binary.rsplit("/", 1)[-1]

    @property
    def private_binary(self) -> str:
        """The cell's own copy of the binary, in its own folder: inspected and run
        there, so a rebuild of the shared cache or another kernel cannot swap it. Beside
        the work folder, not in it: a confined run may write only its work folder, so
        neither the run's other commands nor the kernel can rewrite or remove the copy
        between its calls (`for f in *; do ... > "$f"; done; {binary}` ran a fake in its
        place, a false pass: a red-team finding)."""
        return f"{self.run_dir}/bin/{self.binary_name}"

    @property
    def build_tmp(self) -> str:
        """The build's own $TMPDIR (nvcc's intermediate files), removed once it ends."""
        return f"{self.build_dir}/.farm-tmp"

    @property
    def run_tmp(self) -> str:
        """The run's (and the sanitizer runs') own $TMPDIR, beside the work folder, removed once
        each ends: what a kernel leaves there does not fill the node's /tmp night after night."""
        return f"{self.run_dir}/.farm-tmp"

    def remove_run_dir(self) -> str:
        """Shell removing the cell's folder, and its run's and node's folders once empty."""
        node_dir = self.run_dir.rsplit("/", 1)[0]
        run_dir = node_dir.rsplit("/", 1)[0]
        q = shlex.quote
        # its status is rm's: a folder left (a timeout, a file rm could not remove) is swept at the node's end
        return f"{remove_sh(q(self.run_dir))} && {{ rmdir {q(node_dir)} {q(run_dir)} 2>/dev/null; true; }}"


# nvcc's -arch / --gpu-architecture / -code naming the build machine's own cards
_NATIVE_ARCH = re.compile(r"(?:-arch|--gpu-architecture|-code|--gpu-code)[= ]\S*\bnative\b")


def cell_paths(
    snapshot: NodeSnapshot,
    variant: VariantSpec,
    cell: Cell,
    run: str,
    sources: Placed,
    dependencies: dict[str, Placed],
    toolchain: Placed | None = None,
    compiled: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> CellPaths:
    """Where a cell's build and run live on the node. `run` ("RUNID-TOKEN") names the
    farm run: two farm hosts sharing a node (and its work folder) never share a
    cell's folder, nor do two columns of one machine (toolchains) in one run. COMPILED: the
    job's `sources`, the files its build compiles. ENV: the node's `env:` in farm.yaml, which
    every build runs under."""
    # The build folder is named by everything that determines the binary (the
    # inputs by content), so an unchanged cell reuses it and nvcc is not invoked.
    key_parts = [
        sources.digest,
        "\0".join(compiled),  # which of the files are compiled: a header made a source is another build
        *(f"{name}={placed.digest}" for name, placed in sorted(dependencies.items())),
        variant.build,
        snapshot.nvcc_path,
        snapshot.nvcc_version or "",
        # nvcc's whole --version (its build, not only its release) and the host compilers' files: an
        # nvcc or gcc replaced under the same release number builds another binary
        snapshot.nvcc_output,
        # but cuobjdump's file and release, which build nothing (checked at each inspect instead)
        "\n".join(line for line in snapshot.compilers.splitlines() if not line.startswith("cuobjdump-")),
    ]
    if env:
        # the node's env (farm.yaml), under which every build runs: nvcc reads NVCC_APPEND_FLAGS and
        # NVCC_CCBIN, the host compiler CPATH, a build command its own variables; changed, it made
        # another binary, and the one made before was reused and passed (a red-team finding). Named
        # only where there is one, so the keys of nodes without one stay as they were
        key_parts.append("\0".join(f"env {name}={value}" for name, value in sorted(env.items())))
    if _NATIVE_ARCH.search(" ".join([variant.build, *(env or {}).values()])):
        # nvcc builds `-arch=native` for the cards it finds where it runs: a card swapped on the node
        # makes another binary from the same inputs
        cards = sorted({str(gpu.cc) for gpu in snapshot.gpus} or {str(snapshot.cc)})
        key_parts.append("cards " + ",".join(cards))
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()
    # per farm node: two entries naming one machine never build in one folder
    build_dir = f"{snapshot.workdir}/builds/{cell.node}/{cell.kernel}-{cell.variant}-{key[:20]}"
    # '+' is in no kernel, variant or card slug (config.spec_types.NAME_RE): kernel `a-b` variant `c` and
    # kernel `a` variant `b-c` get folders of their own (with '-' they shared one, and each other's output)
    slot = f"+{cell.device_slug}" if cell.device else ""
    return CellPaths(
        sources=sources,
        dependencies=dependencies,
        build_key=key,
        build_dir=build_dir,
        binary=f"{build_dir}/{cell.kernel}-{cell.variant}",
        run_dir=f"{snapshot.workdir}/cells/{run}/{cell.node}/{cell.kernel}+{cell.variant}{slot}",
        toolchain=toolchain,
    )
