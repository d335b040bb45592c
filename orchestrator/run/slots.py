"""A node's GPUs as slots: one kernel at a time per GPU."""

from __future__ import annotations

import queue
import threading

from orchestrator.run.snapshot import Gpu


class MachineQueues:
    """What is queued on each GPU whose lock file is in one work folder of one machine, whichever
    column (card model, toolchain, farm.yaml name) queued it: a kernel may flock any lock file of
    that folder, so a run's wait is bounded by all of them, and the farm's own pool keeps each GPU
    busy with one run however many columns reach it."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.queued: dict[str, list[float]] = {}  # uuid -> limits in flight
        self.busy: set[str] = set()  # uuids the farm's own pool has running now


class GpuSlots:
    """One kernel at a time per GPU, for one column's GPUs of a card model.

    Where the node has flock, the node itself keeps the order: each GPU has a
    lock file, a run waits on it there, and the farm sends a cell's run as soon
    as the cell is ready, to the GPU with the least work queued. The next run
    starts the moment the last one ends, with no round trip between them. The
    farm only counts what it has queued per GPU (to bound how long a run may
    wait). Elsewhere the farm holds a pool: a run is sent when its GPU is free
    (or one anonymous slot per GPU, for a transport that allocates GPUs itself).
    The counts and the pool are the machine's (MachineQueues), shared by every
    column that runs there; this column picks among its own GPUs only.
    """

    def __init__(
        self,
        gpus: list[Gpu] | None = None,
        anonymous: int = 0,
        on_node: bool = False,
        machine: MachineQueues | None = None,
    ) -> None:
        self.on_node = on_node and bool(gpus)
        self.gpus = list(gpus or [])
        self._machine = machine or MachineQueues()
        with self._machine.changed:
            for gpu in self.gpus:
                self._machine.queued.setdefault(gpu.uuid, [])
        self._anonymous: queue.Queue[None] = queue.Queue()
        for _ in range(anonymous if not gpus else 0):
            self._anonymous.put(None)

    def on(self, machine: MachineQueues) -> GpuSlots:
        """These GPUs, counted and pooled with the rest of `machine`'s."""
        return GpuSlots(self.gpus, on_node=self.on_node, machine=machine)

    def acquire(self, limit: float = 0.0, gpu: Gpu | None = None) -> tuple[Gpu | None, float]:
        """A GPU for a run of at most `limit` seconds, and the longest it may wait
        on the node for the runs queued before it (0 for the farm's own pool).
        `gpu`: that card of this column's, waited for though another is free (a cell's
        sanitizer runs on the card its run was pinned to, whose pass they check)."""
        if not self.gpus:
            return self._anonymous.get(), 0.0
        machine = self._machine
        mine = [g for g in self.gpus if gpu is not None and g.uuid == gpu.uuid] or self.gpus
        with machine.changed:
            if not self.on_node:
                while not (free := [g for g in mine if g.uuid not in machine.busy]):
                    machine.changed.wait()
                machine.busy.add(free[0].uuid)
                return free[0], 0.0
            gpu = min(mine, key=lambda g: (sum(machine.queued[g.uuid]), g.index))
            # the longest queue of the work folder, not this GPU's nor this model's: a kernel on any
            # other GPU may flock this one's lock too (a read-only open is all it takes; Landlock
            # handles no flock) until it is killed, and this run gave up on its lock, an infra-error
            # (red-team rounds 49, and 163 for a GPU of another model or farm.yaml name)
            ahead = max(sum(limits) for limits in machine.queued.values())
            machine.queued[gpu.uuid].append(limit)
            return gpu, ahead

    def release(self, gpu: Gpu | None, limit: float = 0.0) -> None:
        if not self.gpus:
            self._anonymous.put(gpu)
            return
        assert gpu is not None
        with self._machine.changed:
            if self.on_node:
                self._machine.queued[gpu.uuid].remove(limit)
            else:
                self._machine.busy.discard(gpu.uuid)
                self._machine.changed.notify_all()
