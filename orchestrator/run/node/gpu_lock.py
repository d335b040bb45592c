"""The cell's GPU, held by its lock file while a stage runs the kernel on it (the run, the sanitizer
runs): another cell's kernel, or another farm's on the same node and card, waits its turn."""

import os

from orchestrator.run.node.files import now
from orchestrator.run.node.processes import lock_within


def take_gpu(out, spec):
    """(the GPU lock's fd or None, when the wait began or None), once the GPU is the
    cell's; None when its lock stayed taken (said on OUT)."""
    if not spec.get("lock"):
        return None, None
    queued = now()
    try:
        lock = os.open(spec["lock"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        lock = None
    if lock is None or not lock_within(lock, spec["wait"]):
        out.say(f"@@farm gpu-wait-failed {queued} {now()}")
        if lock is not None:
            os.close(lock)
        return None
    return lock, queued
