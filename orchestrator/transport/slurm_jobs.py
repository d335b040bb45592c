"""A Slurm job as the Slurm transport saw it, and the errors for the endings that are Slurm's doing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

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
    memory: str | None = None  # the memory its record says it asked for (squeue %m, sacct ReqMem), e.g. "50M"
    step_state: str | None = None  # accounting's record of its step .0 (sacct), e.g. "CANCELLED by 1234"
    minutes: int | None = None  # the time limit it asked for (srun --time)
    suspended: int = 0  # seconds Slurm held it suspended, by its record: its end less its start and run time
    stuck: str | None = None  # the reason it pended for that Slurm never resolves, when the farm cancelled it so
    unanswered: str | None = None  # squeue's last words when it could not reach slurmctld for the job's record


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


class SlurmStuck(SlurmJobError):
    """Pended for a reason Slurm never resolves by itself (held, partition down, node drained):
    cancelled by the farm. Not retried: the next job pends for the same reason."""

    retryable = False


class SlurmCancelled(SlurmJobError):
    """Cancelled (scancel) by a person or a policy: a resubmission would defy it."""

    retryable = False


class SlurmOutOfMemory(SlurmJobError):
    """Killed by Slurm over the job's memory limit (OUT_OF_MEMORY, OverMemoryKill): a resubmission
    asks for the same memory and is killed the same way."""

    retryable = False


class SlurmTimeLimit(SlurmJobError, CommandTimeout):
    """Killed by Slurm at the job's time limit (state TIMEOUT)."""


# srun's words when slurmctld does not answer (restarting, failing over, overloaded): the request was
# never judged, and a retry once it is back may run (it had been "refused", never retried: a red-team finding)
_NO_CONTROLLER = re.compile(
    r"Unable to contact slurm controller|Socket timed out on send/recv|Zero Bytes were transmitted or received|"
    r"backup controller in standby mode|Communication connection failure"
)


def controller_unreachable(job: SlurmJob, said: str) -> SlurmJobError | None:
    """The error for a job srun could not submit because slurmctld did not answer, or None."""
    words = [m for m in job.messages if _NO_CONTROLLER.search(m)]
    if job.job_id is not None or not words:
        return None
    return SlurmJobError(
        f"{said}: Slurm's controller (slurmctld) could not be reached to submit it; not a verdict on the command "
        f"({'; '.join(words)[-300:]})",
        job,
    )


def pending_hint(job: SlurmJob) -> str:
    """What a job withdrawn at its pending limit could never have had: more time than its partition's
    MaxTime pends for good ("PartitionTimeLimit"; srun says only "Requested nodes are busy")."""
    if job.reason != "PartitionTimeLimit":
        return ""
    return (
        f"; it asked for {job.minutes} min, more than the partition's MaxTime allows, and would never have "
        "started: lower the node's time_limit (without one, each job asks for its command's timeout + 1 min)"
    )


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


# the steps and jobs Slurm's lines name: "STEP 12.1", "StepId=12.1", "step 12.1", "JOB 12"
_NAMED = re.compile(r"(?:STEP |StepId=|[Ss]tep )(\d+)\.(\w+)|JOB (\d+)")


def of_commands_steps(job: SlurmJob, message: str) -> bool:
    """Whether Slurm's line names only steps the command started itself (its own srun: step 1, 2...
    of the farm's job), its business, never the farm's step 0 or the job: without the job's record,
    its own srun's step cancelled at its own timeout read as Slurm ending the job (a red-team finding)."""
    named = _NAMED.findall(message)
    return bool(named) and all(j == job.job_id and s.isdigit() and s != "0" and not whole for j, s, whole in named)


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


# Slurm's words for a kill over the job's memory: slurmstepd's OverMemoryKill ("StepId=12.0 exceeded
# memory limit (272887808 > 52428800), being killed"; srun: "Exceeded job memory limit") and the
# cgroup's OOM handler ("Detected 1 oom-kill event(s) in StepId=12.0..."; srun: "task 0: Out Of Memory")
_OOM = re.compile(r"exceeded memory limit|Exceeded job memory limit|oom[-_]kill event|tasks? [\d,-]+: Out Of Memory")
_OVER = re.compile(r"exceeded memory limit \(\d+ > (\d+)\)")
_STEP = re.compile(r"StepId=(\d+)\.")


def memory_kill(job: SlurmJob) -> str | None:
    """What Slurm says of a kill over the job's memory, any step of it (the command's own srun's step
    runs under the same job's limit), or None. A cgroup's OOM kills one process (the kernel, cicc)
    and its shell goes on: the record may read COMPLETED or FAILED (a red-team finding)."""
    said = [
        m
        for m in job.messages
        if _OOM.search(m) and (job.job_id is None or (step := _STEP.search(m)) is None or step.group(1) == job.job_id)
    ]
    if not said and "OUT_OF_MEMORY" not in (job.state, (job.step_state or "").split(" ")[0]):
        return None
    limit = job.memory
    if limit is None and (over := next((found for m in said if (found := _OVER.search(m))), None)):
        limit = f"{int(over.group(1)) >> 20}M"
    return f"the memory limit of {limit}" if limit and limit != "0" else "its memory limit"


def cancelled_by(job: SlurmJob) -> str | None:
    """Who cancelled (signalled with SIGKILL) the farm's step, by accounting's step record: srun says
    the same ("task 0: Killed", "Force Terminated StepId=12.0") whether `scancel --signal=KILL 12.0`
    or the step's own shell killed by its command; only sacct's step State "CANCELLED by UID" names
    a requester (a step dead of its own signal reads CANCELLED, by no one)."""
    found = re.fullmatch(r"CANCELLED by (\d+)", job.step_state or "")
    return f"uid {found.group(1)}" if found else None


def slurms_kill(job: SlurmJob, said: str, memory: str | None, srun: str) -> SlurmJobError | None:
    """The error for a step Slurm killed over its memory, or someone killed by name; `said` names the
    node and the job, `memory` is the node's, `srun` what srun and slurmstepd said."""
    if (limit := memory_kill(job)) is not None:
        mem = f"raise the node's `memory` (now {memory}" if memory else "set the node's `memory` ("
        return SlurmOutOfMemory(
            f"{said} was killed by Slurm over {limit} while it ran (its record says {job.state}); not a verdict "
            f"on the command: {mem}, passed as srun --mem) above what its builds and kernels need{srun}",
            job,
        )
    if (who := cancelled_by(job)) is not None:
        return SlurmCancelled(
            f"{said} was cancelled while it ran: its step killed by {who} (Slurm's accounting: {job.step_state}); "
            f"not a verdict on the command{srun}",
            job,
        )
    return None


def read_records(job: SlurmJob, token: str, records: str) -> None:
    """The job's record (squeue's or sacct's: id|state|node|reason|memory), its step's (sacct's), and
    squeue's words where it could not ask slurmctld."""
    for line in records.splitlines():
        if line.startswith(f"@@slurm-noctld-{token} "):
            job.unanswered = line.split(" ", 1)[1].strip() or "no answer"
        if line.startswith(f"@@slurm-step-{token} ") and job.job_id:
            step, _, state = line.split(" ", 1)[1].partition("|")
            job.step_state = state.strip() if step == f"{job.job_id}.0" else job.step_state
        if not line.startswith(f"@@slurm-job-{token} "):
            continue
        fields = line.split(" ", 1)[1].split("|")
        if len(fields) < 2 or not fields[0]:
            continue
        job.job_id = job.job_id or fields[0]
        job.state = fields[1].split()[0] if fields[1].split() else None  # sacct: "CANCELLED by 0"
        if len(fields) > 2 and fields[2] and fields[2] != "None assigned":
            job.compute_node = job.compute_node or fields[2]
        if len(fields) > 3 and fields[3] not in ("", "None"):
            job.reason = fields[3]
        if len(fields) > 4 and fields[4].strip():
            job.memory = fields[4].strip()
        if len(fields) > 7 and job.state in RESULT_STATES | INFRA_STATES | {"COMPLETING"}:  # its end is its own
            job.suspended = _suspended(*fields[5:8])


def _seconds(used: str) -> int | None:
    """squeue's %M or sacct's Elapsed ("0:03", "1:02:03", "1-02:03:04") in seconds, or None."""
    days, _, clock = used.strip().rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in [*parts, days or "0"]) or len(parts) > 3:
        return None
    return int(days or 0) * 86400 + sum(int(p) * 60**i for i, p in enumerate(reversed(parts)))


def _instants(text: str) -> set[float]:
    """The epoch seconds a record's time may be: Slurm's epoch (the query asks SLURM_TIME_FORMAT=%s) or a
    time with its offset, one; a local wall-clock time without a zone (a Slurm that ignores the
    format), each reading the local zone allows (the autumn's repeated hour, the spring's skipped one)."""
    text = text.strip()
    if text.isdigit():
        return {float(text)}
    moment = datetime.fromisoformat(text)  # "Unknown", "N/A": ValueError
    if moment.tzinfo is not None:
        return {moment.timestamp()}
    return {moment.replace(fold=fold).timestamp() for fold in (0, 1)}


def _suspended(start: str, end: str, used: str) -> int:
    """Seconds of a finished job's span its run time leaves out: Slurm's run time (squeue %M, sacct Elapsed)
    stops while it is suspended. Never naive wall-clock arithmetic: 01:50 to 03:10 across a spring change
    is 20 min, and read naive was an hour suspended, infra-error for a job never stopped (red-team 176);
    where the local times allow two spans, the shorter, so a clock change is never a suspension."""
    run = _seconds(used)
    try:
        spans = [last - first for first in _instants(start) for last in _instants(end)]
    except ValueError:  # "Unknown", "N/A": no span to compare
        return 0
    return max(int(min(spans)) - run, 0) if run is not None else 0


# seconds of suspension that make a job infra: its record's times are whole seconds, read by two
# programs, and a second's rounding between its span and its run time must fail no job
SUSPENDED_MIN = 2


def suspension(job: SlurmJob, said: str) -> SlurmJobError | None:
    """The error for a job Slurm suspended while it ran (`scontrol suspend`, PreemptMode=SUSPEND, gang
    scheduling): every process of it stopped, and the wall clocks of the farm's guards ran on. Resumed,
    a `timeout` past its limit killed the command at once, exit 124: the kernel's timeout, its record
    COMPLETED (red-team round 174). Retried: the next job may run unsuspended."""
    if job.suspended < SUSPENDED_MIN:
        return None
    return SlurmJobError(
        f"{said} was suspended by Slurm for {job.suspended} s while it ran (its record says {job.state}): "
        "its timeouts and times ran on while its processes were stopped; not a verdict on the command",
        job,
    )
