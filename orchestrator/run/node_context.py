"""What a node's cells share once it is probed and staged, and the helpers that make it."""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.farm import Farm
from orchestrator.run.cell import StageRecord
from orchestrator.run.health import NodeHealth
from orchestrator.run.resident import ResidentRunner
from orchestrator.run.slots import GpuSlots, MachineQueues
from orchestrator.run.snapshot import Gpu, NodeSnapshot
from orchestrator.run.staging import Staging
from orchestrator.transport import Transport


def default_cache_dir() -> Path:
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    except RuntimeError:  # no home at all (`env -i` under a uid without a passwd entry): this user's own temp
        base = str(_own_temp_folder(Path(tempfile.gettempdir()) / f"farm-cache-{os.getuid()}"))
    return Path(base) / "farm" / "archives"


def _own_temp_folder(named: Path) -> Path:
    """`named`, made 0700 where missing, if it is this uid's own folder that no other may write; else a
    fresh folder of its own. Anyone may make the name first in a shared /tmp, and a toolchain tree
    planted in it was taken as unpacked, its nvcc building every kernel (review 124)."""
    try:
        named.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError:
        return Path(tempfile.mkdtemp(prefix="farm-cache-"))
    found = named.lstat()
    if stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not found.st_mode & 0o022:
        return named
    return Path(tempfile.mkdtemp(prefix="farm-cache-"))  # no cache kept between runs, but none planted


def declared_snapshot(name: str, farm: Farm) -> NodeSnapshot:
    """What farm.yaml says of a node, for cells whose node could not be probed."""
    node = farm.nodes[name]
    return NodeSnapshot(
        node=name,
        workdir="",
        hostname="",
        os="",
        gpu_name=node.gpu,
        cc=node.declared_cc,
        driver=None,
        memory=None,
        gpu_count=0,
        nvcc_path=node.nvcc,
        nvcc_version=None,
        smi_output="",
        declared_gpu=node.gpu,
        declared_cc=node.declared_cc,
    )


def in_background_each(actions: Sequence[Callable[[], Any]], name: str) -> list[Future[Any]]:
    """`actions` one after another in one thread of their own (a thread less per node for
    each one beside the first): each one's result, or its error, in its own Future; one
    that raised does not keep the next from running."""
    futures: list[Future[Any]] = [Future() for _ in actions]

    def run() -> None:
        for action, future in zip(actions, futures, strict=True):
            try:
                future.set_result(action())
            except BaseException as err:  # handed to whoever waits on it
                future.set_exception(err)

    threading.Thread(target=run, daemon=True, name=name).start()
    return futures


@dataclass
class NodeContext:
    """What a node's cells share once it is probed and staged."""

    stage_record: StageRecord  # the node's staging, shown on each cell with what concerned it
    snapshot: NodeSnapshot
    stored: Future[int]  # the node's snapshot row, stored beside its first cells (snapshot_id)
    staging: Staging
    devices: dict[str, list[Gpu]]  # card model -> its GPUs ({"": []} without a GPU)
    slots: dict[str, GpuSlots]  # card model -> its free GPUs
    cuobjdump: str
    health: NodeHealth
    setup: Transport
    lock: threading.Lock = field(default_factory=threading.Lock)
    build_locks: dict[str, threading.Lock] = field(default_factory=dict)  # build folder -> its lock
    built: dict[str, str] = field(default_factory=dict)  # build key -> binary sha256 built in this run
    # build key -> its binary as the store had it at the start, read beside the first cells
    recorded: Future[dict[str, str | None]] = field(default_factory=Future)
    down_since: float | None = None  # monotonic time the node was first found unreachable, while it is
    # why the node did not come back: its last reconnection's error; a refused host key is final, as is
    # another driver it came back with, or a module reload a cell's run saw (refused: no more cells run there)
    down_why: str = ""
    refused: bool = False
    answered: bool = False  # the wait's last try reached the node, which could not serve it (down_why says)
    shared_builds: set[tuple[str, str]] = field(default_factory=set)  # (kernel, variant) of cells of several cards
    unswept: bool = False  # a cell may have left its folder on the node (its pipeline could not remove it)
    resident: ResidentRunner | None = None  # the node's python3 serving all of its cells

    @property
    def snapshot_id(self) -> int:
        """The node's snapshot row, once stored; the store's error, where it failed."""
        return self.stored.result()

    def build_lock(self, build_dir: str) -> threading.Lock:
        with self.lock:
            return self.build_locks.setdefault(build_dir, threading.Lock())


def node_devices(transport: Transport, snapshot: NodeSnapshot) -> tuple[dict[str, list[Gpu]], dict[str, GpuSlots]]:
    """The node's card models and a slot pool for each. A transport that does not
    let the farm pin a GPU (Slurm places its jobs) gets anonymous slots."""
    if not snapshot.has_gpu:
        return {"": []}, {"": GpuSlots(anonymous=1)}
    if not transport.pins_gpus:
        name = snapshot.gpu_name or ""
        return {name: list(snapshot.gpus)}, {name: GpuSlots(anonymous=max(snapshot.gpu_count, 1))}
    devices = snapshot.devices()
    machine = MachineQueues()  # the node's models, one work folder: each may hold up the others' locks
    return devices, {name: GpuSlots(gpus, on_node=snapshot.flock, machine=machine) for name, gpus in devices.items()}
