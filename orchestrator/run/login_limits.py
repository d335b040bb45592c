"""The login's own resource limits, as the probe reads them: a node's trouble, never a kernel's.

A node's login may carry limits of its own (`ulimit -v`, `-f` or `-t` in a profile, limits.conf's
`as`, `fsize` or `cpu` through pam_limits, a Slurm job's propagated limits), and every build and
kernel there inherits them. Under a limited address space CUDA cannot start: it reserves address
space for the host's and the cards' memory (its unified addressing) and fails "out of memory", and
nvcc's cicc may too; under a file size limit below the farm's own (commands.OUTPUT_LIMIT), a kernel
writing less than the farm allows is killed by SIGXFSZ; under a CPU time limit, a build or kernel
within its job's timeouts is killed by SIGXCPU (and the resident runner, one process for the whole
run). Each was stored as the kernel's `fail` (red-team round 229). The probe reads each soft limit
(the one a process is held to): the shell's /proc/self/limits, the resident runner's getrlimit, as
`limit NAME SECONDS|BYTES|unlimited` lines of its `room` section (probe_output._room).
"""

from __future__ import annotations

from orchestrator.run.commands import OUTPUT_LIMIT
from orchestrator.run.snapshot import NodeSnapshot


def limits_problem(snapshot: NodeSnapshot) -> str | None:
    """Why the login's limits keep the node from serving its cells, or None."""
    cpu = snapshot.cpu_time_limit
    if cpu is not None:  # any: the resident runner, one process for the whole run, is held to it too
        return (
            f"its login limits each process's CPU time to {cpu} s (`ulimit -t`, limits.conf's `cpu`): a build or "
            "kernel within its job's timeouts is killed by SIGXCPU past it, and the farm's runner on the node, one "
            "process for the whole run, with it; lift it for the farm's login"
        )
    space = snapshot.address_space_limit
    if space is not None:
        return (
            f"its login limits each process's address space to {space >> 20} MiB (`ulimit -v`, limits.conf's "
            "`as`): CUDA reserves address space for the host's and the cards' memory when it starts and fails "
            'under such a limit ("out of memory"), whatever the kernel; lift it for the farm\'s login'
        )
    size = snapshot.file_size_limit
    if size is not None and size < OUTPUT_LIMIT:
        return (
            f"its login limits each file to {size >> 20} MiB (`ulimit -f`, limits.conf's `fsize`), under the "
            f"{OUTPUT_LIMIT >> 20} MiB the farm lets a build's and a kernel's files and output grow to: a kernel "
            "within the farm's limit would be killed by SIGXFSZ; lift it for the farm's login"
        )
    return None
