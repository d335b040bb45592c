"""A Slurm job as the Slurm transport saw it, and the errors for the endings that are Slurm's doing."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.errors import CommandTimeout, InfraError

# Slurm's job states (squeue %T; sacct State, first word).
RESULT_STATES = frozenset({"COMPLETED", "FAILED", "OUT_OF_MEMORY"})
INFRA_STATES = frozenset(
    {"CANCELLED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT"}
)
STATE_WORDS = {
    "CANCELLED": "was cancelled",
    "NODE_FAIL": "lost its compute node (NODE_FAIL)",
    "BOOT_FAIL": "could not boot its compute node (BOOT_FAIL)",
    "DEADLINE": "passed its deadline (DEADLINE)",
    "PREEMPTED": "was preempted by another job (PREEMPTED)",
    "REVOKED": "was revoked by a sibling cluster (REVOKED)",
    "SPECIAL_EXIT": "ended in SPECIAL_EXIT",
    "TIMEOUT": "reached its Slurm time limit (TIMEOUT)",
}


@dataclass
class SlurmJob:
    """One job this transport submitted, as Slurm and srun told of it."""

    name: str  # the unique --job-name
    job_id: str | None = None  # None when Slurm refused it at submission
    compute_node: str | None = None  # None when it never started
    state: str | None = None  # Slurm's final state, e.g. COMPLETED, CANCELLED, NODE_FAIL
    reason: str | None = None  # Slurm's reason for the state, e.g. why it pended
    started: bool = False  # its shell ran on a compute node
    cards: tuple[str, ...] = ()  # the GPU models (name, CC) its shell saw, sorted: a cgroup may show one
    messages: list[str] = field(default_factory=list)  # srun's and slurmstepd's lines


class SlurmJobError(InfraError):
    """Slurm ended the job, or never started it: the cluster's doing, not the kernel's."""

    def __init__(self, message: str, job: SlurmJob) -> None:
        super().__init__(message)
        self.job = job


class SlurmRejected(SlurmJobError):
    """Refused at submission (unknown partition, a GPU request no node can meet):
    the same request is refused every time."""

    retryable = False


class SlurmPendingLimit(SlurmJobError):
    """Waited for its allocation past the node's pending_limit; withdrawn. Not
    retried: a retry is only a longer wait, and the limit says how long is enough."""

    retryable = False


class SlurmCancelled(SlurmJobError):
    """Cancelled (scancel) by a person or a policy: a resubmission would defy it."""

    retryable = False


class SlurmTimeLimit(SlurmJobError, CommandTimeout):
    """Killed by Slurm at the job's time limit (state TIMEOUT)."""


def _error_for(state: str) -> type[SlurmJobError]:
    return {"TIMEOUT": SlurmTimeLimit, "CANCELLED": SlurmCancelled}.get(state, SlurmJobError)
