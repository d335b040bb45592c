"""A node's GPUs as slots: one kernel at a time per GPU."""

from __future__ import annotations

import queue
import threading

from orchestrator.run.snapshot import Gpu


class GpuSlots:
    """One kernel at a time per GPU.

    Where the node has flock, the node itself keeps the order: each GPU has a
    lock file, a run waits on it there, and the farm sends a cell's run as soon
    as the cell is ready, to the GPU with the least work queued. The next run
    starts the moment the last one ends, with no round trip between them. The
    farm only counts what it has queued per GPU (to bound how long a run may
    wait). Elsewhere the farm holds a pool: a run is sent when its GPU is free
    (or one anonymous slot per GPU, for a transport that allocates GPUs itself).
    """

    def __init__(self, gpus: list[Gpu] | None = None, anonymous: int = 0, on_node: bool = False) -> None:
        self.on_node = on_node and bool(gpus)
        self._free: queue.Queue[Gpu | None] = queue.Queue()
        self._queued: dict[str, list[float]] = {gpu.uuid: [] for gpu in gpus or []}  # uuid -> limits in flight
        self._gpus = list(gpus or [])
        self._lock = threading.Lock()
        for gpu in self._gpus:
            self._free.put(gpu)
        for _ in range(anonymous if not gpus else 0):
            self._free.put(None)

    def acquire(self, limit: float = 0.0) -> tuple[Gpu | None, float]:
        """A GPU for a run of at most `limit` seconds, and the longest it may wait
        on the node for the runs queued before it (0 for the farm's own pool)."""
        if not self.on_node:
            return self._free.get(), 0.0
        with self._lock:
            gpu = min(self._gpus, key=lambda g: (sum(self._queued[g.uuid]), g.index))
            # the longest queue on the node, not this GPU's: a kernel on another GPU may flock this
            # one's lock too (a read-only open is all it takes; Landlock handles no flock) until it
            # is killed, and this run gave up on its lock, an infra-error (a red-team finding)
            ahead = max(sum(limits) for limits in self._queued.values())
            self._queued[gpu.uuid].append(limit)
            return gpu, ahead

    def release(self, gpu: Gpu | None, limit: float = 0.0) -> None:
        if not self.on_node:
            self._free.put(gpu)
            return
        with self._lock:
            assert gpu is not None
            self._queued[gpu.uuid].remove(limit)
