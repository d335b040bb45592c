"""A node out of processes: a failed stage whose own tools said they could not start one.

A node's user at its process limit (`ulimit -u`, a cgroup's `pids.max`, the kernel's `pid_max`:
another tenant's fork bomb, a leak of the node's own) fails every build and run there, whatever
the kernel: gcc's "collect2: fatal error: vfork: Resource temporarily unavailable" was judged the
kernel's build-fail, a regression flagged on the kernel, exit 1 (red-team round 116). These are the
system's words for fork's EAGAIN as the tools print them, at the start of a line after the tool's
name, where a compiler's diagnostic of the source ("k.cu(3): error: ...") never is.
"""

from __future__ import annotations

import re

_FORK_FAILED = re.compile(
    # gcc, collect2, bash, python: "TOOL: [fatal error: ...: ]vfork: Resource temporarily unavailable"
    r"^(?:[\w.+/-]+: |nvcc (?:fatal|error)\s*: ).*"
    r"\b(?:v?fork|clone|posix_spawnp?)(?:: retry)?: Resource temporarily unavailable$"
    # dash: "sh: 1: Cannot fork", "sh: 1: eval: Cannot fork"
    r"|^(?:\S*/)?(?:sh|dash|ash): (?:\d+: )?(?:[\w.]+: )?Cannot fork$",
    re.M,
)


def fork_failed(log: bytes | str) -> str:
    """The first line of `log` in which a tool said it could not start a process, or ""."""
    text = log.decode("utf-8", "replace") if isinstance(log, bytes) else log
    found = _FORK_FAILED.search(text)
    return found.group(0).strip()[:200] if found else ""


def out_of_processes(node: str, stage: str, said: str) -> str:
    """The infra reason for a stage that failed so: what to look at on the node."""
    return (
        f'node {node!r}: its {stage} could not start a process ("{said}"): the node\'s user is out of '
        "processes (its `ulimit -u`, a cgroup's pids.max, the kernel's pid_max: another tenant's, or "
        "leftovers'), the node's trouble, not the kernel's"
    )
