"""A Slurm job as the Slurm transport saw it, and the errors for the endings that are Slurm's doing."""

from __future__ import annotations

import re
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


# slurmstepd's words when Slurm ends a step or job ("*** STEP 12.0 ON n1 CANCELLED AT <time> ***",
# "... DUE TO TIME LIMIT ***", "*** JOB 12 ON n1 CANCELLED AT <time> DUE TO PREEMPTION ***")
_STEPD_ENDED = r"\*\*\* (?:STEP {id}\.0|JOB {id}) ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))? \*\*\*"
_DUE_TO = {"TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}


def ended_by_slurm(job: SlurmJob) -> str | None:
    """The state Slurm's own words say it ended the farm's step in (CANCELLED, TIMEOUT...), or None.

    The job's record may still read COMPLETED or FAILED: a step cancelled alone (`scancel 12.0`), a
    job signalled (`scancel --signal=TERM 12`) or an srun terminated on the login node ends the
    step, not the job, and the shell may even go on to exit 0 (a red-team finding). Only step .0,
    the farm's own: a step the command started itself (its own srun) is the command's business."""
    if job.job_id is None:
        return None
    pattern = re.compile(_STEPD_ENDED.format(id=re.escape(job.job_id)))
    for message in job.messages:
        # not srun's "forcing job termination": the command's own srun (a launcher the farm's timeout
        # kills) says it too, and the farm's srun terminated makes slurmstepd say the above
        if found := pattern.search(message):
            return _DUE_TO.get(found.group(1) or "", "CANCELLED")
    return None


def within_time_limit(err: SlurmTimeLimit, time_limit: int | None, timeout: float) -> SlurmTimeLimit:
    """A job Slurm stopped at a node's `time_limit` shorter than the command's own limit: not a
    passing fault, and the farm's own timeout (a hung kernel's verdict) never had its turn. Retried,
    each attempt ran to the same limit, and a hung kernel read infra-error every night (a red-team
    finding): said, once, with what to raise."""
    if time_limit is None or time_limit * 60 >= timeout:
        return err
    short = SlurmTimeLimit(
        f"{err}; the node's time_limit of {time_limit} min is shorter than the command's own limit of "
        f"{timeout:.0f} s, so Slurm stopped it before the farm's timeout could judge it: raise time_limit",
        err.job,
    )
    short.retryable = False
    return short
