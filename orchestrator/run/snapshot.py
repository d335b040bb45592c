"""What the probe found of a node: its cards (Gpu) and its snapshot (NodeSnapshot), the
record every cell of the node is planned, judged and stored with; and the room a node must
have. probe.py asks the node and reads the answer into these."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.terminal import card_text

# room a node's work folder and temporary folder must have for builds and runs: a full disk
# made a build-fail, an inspect-fail (a dump cut short) or a fail (a marker never written)
MIN_FREE = 256 << 20
# free inodes there: a disk out of inodes with blocks to spare made build-fail ("mkstemp: No space
# left on device") and fail, where one out of blocks was infra-error (a red-team finding)
MIN_FREE_INODES = 1024


@dataclass(frozen=True)
class Gpu:
    """One card as nvidia-smi lists it, and whether the driver confirms it."""

    index: int
    uuid: str
    name: str
    cc: ComputeCapability
    memory: str
    verified: bool = False  # the driver (NVML) knows this UUID with this name and CC
    check: str = ""  # in words: what confirmed it, or what did not match
    # its uncorrectable ECC count at the probe ("[N/A]": ECC off; "": not said), which a failed run's
    # look reads its count against (gpu_state.gpu_unfit); not part of what the card is
    ecc: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        # the name as terminal.card_text shows it: a look-alike card's reasons read as the real one's (review 213)
        return f"GPU {self.index} ({card_text(self.name)}, CC {self.cc}, {self.uuid})"


@dataclass(frozen=True)
class NodeSnapshot:
    """A node as probed at the start of a run (stored with the run)."""

    node: str
    workdir: str  # absolute path of the farm's folder on the node
    hostname: str
    os: str
    gpu_name: str | None  # the first usable GPU's, for one-line summaries
    cc: ComputeCapability | None
    driver: str | None
    memory: str | None
    gpu_count: int
    nvcc_path: str
    nvcc_version: str | None  # "13.0.88", None when nvcc is missing
    smi_output: str
    declared_gpu: str | None
    declared_cc: ComputeCapability | None
    driver_evidence: str = ""  # the kernel driver's version line and /dev/nvidiactl, if present
    gpus: tuple[Gpu, ...] = ()  # the GPUs the farm may use (farm.yaml `gpus:` applied)
    nvcc_output: str = ""  # what `nvcc --version` printed, for a message when it failed
    gpu_indexes: frozenset[int] = frozenset()  # every index nvidia-smi listed, before `gpus:` applied
    driver_check: str = ""  # the cross-check of nvidia-smi against the driver, in words
    # the host compilers, assembler and linker on the login's PATH (gcc is nvcc's): "NAME FILE SIZE
    # MTIME INODE CTIME" lines, then "env NAME HEX" for the compilers' variables the login sets and
    # "nvcc-setup SHA256" for nvcc's dry run (noderunner.NVCC_SETUP): in the build key
    compilers: str = ""
    flock: bool = False  # util-linux's flock is there: runs queue on the node itself (slots.GpuSlots)
    python: str | None = None  # the node's python3 (3.8 or later): cells go to noderunner.py, not to shell
    # that python3's sys.version and the runner compiled by it (marshal), sent to each cell's runner:
    # only a python3 of that very version loads it (another compiles the runner's source, sent beside)
    python_version: str = ""
    runner_code: bytes = field(default=b"", repr=False)
    # folder -> its digest as the node computed it ("" when missing), for the folders the probe
    # was asked about: what staging would otherwise ask in a round trip of its own per bundle
    folder_digests: dict[str, str] = field(default_factory=dict)
    # of those, the ones the resident probe put in place from the bundles sent with it (probe_plan)
    placed: frozenset[str] = frozenset()
    resident: bool = False  # one python3 runs all of the run's cells there (resident.py)
    # KiB free in the work folder and in the temporary folder, and whether a program in the work
    # folder can run (no noexec mount); None where the probe could not tell (room_problem, asked by node_setup.py)
    work_free_kib: int | None = None
    tmp_free_kib: int | None = None
    work_free_inodes: int | None = None  # None also where the file system counts none (btrfs)
    tmp_free_inodes: int | None = None
    work_executes: bool | None = None
    # the login's soft limits, seconds and bytes (`ulimit -t`, `-v`, `-f`); None where unlimited or unread
    # (login_limits.py)
    cpu_time_limit: int | None = None
    address_space_limit: int | None = None
    file_size_limit: int | None = None
    unreadable_gpus: tuple[str, ...] = ()  # nvidia-smi's rows of GPUs whose CC could not be read ("[N/A]")
    # the boards the NVIDIA kernel driver holds (/proc/driver/nvidia/gpus/*/information's models)
    driver_boards: tuple[str, ...] = ()

    def room_problem(self) -> str | None:
        """Why the node cannot hold builds and runs, or None: a work folder or temporary folder
        with less than MIN_FREE, or a work folder mounted noexec. Found by a red-team helper:
        a full disk made build-fail (ld's error), inspect-fail (a dump cut short: "HGMMA
        missing") or fail (a marker never written), and noexec a fail (exit 126): all exit 1."""
        need = MIN_FREE >> 10
        for where, free in (("work folder", self.work_free_kib), ("temporary folder", self.tmp_free_kib)):
            if free is not None and free < need:
                return f"its {where} has {free >> 10} MiB free, the farm needs {need >> 10} MiB there"
        for where, free in (("work folder", self.work_free_inodes), ("temporary folder", self.tmp_free_inodes)):
            if free is not None and free < MIN_FREE_INODES:
                return f"its {where} has {free} inodes free (files it can make), the farm needs {MIN_FREE_INODES}"
        if self.work_executes is False:
            return "its work folder is mounted noexec: no kernel can run from it"
        return None

    def gpu_problem(self) -> str | None:
        """Why a node that lists no GPU has one that does not work, or None: nvidia-smi is
        there but failed (not "No devices were found"), or the NVIDIA driver is loaded and
        nvidia-smi is not on the login's PATH, or nvidia-smi lists none of the boards the
        driver holds."""
        lines = self.smi_output.strip().splitlines()
        rc = lines[-1].strip() if lines else ""
        said = " / ".join(line.strip() for line in lines[:-1] if line.strip())[-200:] or "no output"
        if rc not in ("rc=0", "rc=127") and "No devices were found" not in self.smi_output:
            code = rc.removeprefix("rc=")
            return f"nvidia-smi failed ({'hung' if code == '124' else 'exit ' + code}: {said})"
        if rc == "rc=127" and self.driver_evidence.strip():
            first = self.driver_evidence.strip().splitlines()[0][:120]
            return f"the NVIDIA driver is loaded ({first}) but nvidia-smi cannot be started ({said})"
        if self.driver_boards and not self.gpu_indexes and not self.unreadable_gpus:
            # "No devices were found" from a driver that holds a board is a card that failed to start
            # (RmInitAdapter, off the bus), not a machine without one: it was a green compile-only
            # row, exit 0 (a red-team finding)
            boards = ", ".join(self.driver_boards)[:200]
            return (
                f"nvidia-smi lists no GPU ({said}), yet the NVIDIA driver holds {len(self.driver_boards)} "
                f"(/proc/driver/nvidia/gpus: {boards}): a card that failed to start, or one kept from this "
                "login (a Slurm job given no GPU: the node's `gres:`)"
            )
        return None

    def runner_python(self, node: NodeSpec) -> str | None:
        """The python3 that runs this node's cell stages (noderunner.py), or None: the
        shell scripts. Slurm's commands come back through srun as text, not streamed:
        always the shell there."""
        if node.runner == "shell" or node.transport == "slurm":
            return None
        return self.python

    def runner_label(self, node: NodeSpec) -> str:
        """Who runs this node's cell stages, in words: "python3 PATH (...)" or "shell"."""
        python = self.runner_python(node)
        if not python:
            return "shell"
        return f"python3 {python} ({'resident: one for all the cells' if self.resident else 'one per cell'})"

    @property
    def real_gpu(self) -> bool:
        """Some GPU of the node is confirmed by the driver (see the module's
        docstring). Only results on a verified GPU can certify a kernel."""
        return any(g.verified for g in self.gpus)

    @property
    def has_gpu(self) -> bool:
        return self.cc is not None

    @property
    def cc_mismatch(self) -> bool:
        """A card differs from what farm.yaml declares (probe drift)."""
        if self.declared_cc is None or not self.gpus:
            return self.declared_cc is not None and self.cc is not None and self.declared_cc != self.cc
        return any(g.cc != self.declared_cc for g in self.gpus)

    def devices(self) -> dict[str, list[Gpu]]:
        """The node's GPUs grouped by card model, in index order: each model is
        one column of the matrix, and any GPU of a model may run its cells. A model
        is its name and its CC: cards of one name and several CCs (nvidia-smi's "NVIDIA
        Graphics Device" for any card its driver cannot name) are a column each, named
        "NAME (CC X.Y)"; grouped by name alone, a cell run on the second card was judged
        and stored under the first card's CC, certifying a CC it never ran on (red-team round 96)."""
        groups: dict[str, list[Gpu]] = {}
        for gpu, column in zip(self.gpus, card_columns([(g.name, str(g.cc)) for g in self.gpus]), strict=True):
            groups.setdefault(column, []).append(gpu)
        return groups


def card_columns(cards: list[tuple[str, str]]) -> list[str]:
    """Each card's column, for (name, CC) pairs of one node's cards: its name, or "NAME (CC X.Y)"
    where cards of its name have several CCs (NodeSnapshot.devices; the report reads a stored
    probe's cards so too)."""
    ccs: dict[str, set[str]] = {}
    for name, cc in cards:
        ccs.setdefault(name, set()).add(cc)
    return [name if len(ccs[name]) == 1 else f"{name} (CC {cc})" for name, cc in cards]
