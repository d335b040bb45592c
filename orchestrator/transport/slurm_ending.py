"""Reading what a Slurm job's submission sent back (slurm.py sends it): the command's stdout and status, its stderr
without srun's and slurmstepd's lines, and whether the job ended by Slurm's doing (refused, withdrawn, cancelled,
killed, preempted: an InfraError, never a result) or by the command's own."""

from __future__ import annotations

import re

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.transport.slurm_jobs import (
    INFRA_STATES,
    RESULT_STATES,
    STATE_WORDS,
    SlurmJob,
    SlurmJobError,
    SlurmPendingLimit,
    SlurmRejected,
    SlurmStuck,
    _error_for,
    controller_unreachable,
    ended_by_slurm,
    of_commands_steps,
    pending_hint,
    read_records,
    slurms_kill,
    suspension,
)
from orchestrator.transport.slurm_query import UNSETTLED, start_line

STDERR_KEEP = 1 << 16  # bytes of a command's stderr handed back, as the login transports keep of theirs
_SLURM_LINE = re.compile(r"^(srun|slurmstepd(-[^:\s]*)?): ")
# what srun and slurmstepd print as a job ends, at the very end of stderr
_SLURM_ENDING = re.compile(
    r"(?:srun: error: \S+: tasks? [\d,-]+: |slurmstepd(?:-[^:\s]*)?: error: \*\*\* |(?:(?<=\n)|\A)srun: )[^\n]*\n?\Z"
)
# srun's or slurmstepd's words for an ending that is Slurm's doing (a command's
# own "task 0: Exited with exit code 1" or "task 0: Segmentation fault" is not)
_SLURM_TROUBLE = re.compile(r"CANCELLED|Node failure|TIME LIMIT|Force Terminated|revoked|PREEMPT|Unable to allocate")


def read_submission(name: str, job: SlurmJob, token: str, text: str) -> tuple[str, int]:
    """The command's stdout and its status from what the submission printed; the job's start line and its
    record go into `job`."""
    end = f"\n@@slurm-end-{token} "
    cut = text.rfind(end)
    if cut < 0:
        raise SlurmJobError(
            f"node {name!r}: the submission of Slurm job {job.name} on the login node "
            f"ended without a status ({text.strip()[-300:]!r})",
            job,
        )
    body, tail = text[:cut], text[cut + len(end) :]
    rc_text, _, records = tail.partition("\n")
    rc = int(rc_text.strip()) if rc_text.strip().lstrip("-").isdigit() else 255
    # the stuck-job watcher's line (slurm_query.stuck_watch): written as the job still pended, it may
    # land among the command's output where the job started at that moment; taken out wherever it is
    stuck = re.compile(rf"@@slurm-stuck-{token} ([^\n]*)\n")
    if found := stuck.search(body):
        job.stuck = found.group(1).strip() or "unknown"
        body = stuck.sub("", body)
    start, before = start_line(token, body)
    job.messages.extend(before)
    if start:
        job.started = True
        job.job_id = start.group(1) or None
        job.compute_node = start.group(2) or None
        job.cards = tuple(sorted({c.strip() for c in start.group(3).split(";") if c.strip()}))
        body = body[start.end() :]
    read_records(job, token, records)
    return body, rc


def own_stderr(start: str, command: str, token: str, keep: int = STDERR_KEEP) -> str:
    """The job shell's script: `start`, then `command` with its stderr in a file of the shell's own (unlinked
    at once, read back through fd 9), handed back after it on stdout, hex-encoded, behind the marker
    command_output reads. srun's stderr then holds Slurm's lines alone: a kernel's stderr went straight
    onto it, and its forged "slurmstepd: ... CANCELLED" or "oom-kill event" line read as Slurm ending the
    job, an infra-error where its own exit was a fail (red-team 250). No mktemp: the notemp line, exit 125."""
    return (
        'f=$(mktemp 2>/dev/null || mktemp -p /tmp) && exec 2>"$f" 9<"$f" && rm -f "$f" || f=; '
        f'{start}[ -n "$f" ] || {{ printf "@@slurm-notemp-{token}\\n"; exit 125; }}; '
        f"( {command}\n) 9<&-; rc=$?; printf '\\n@@slurm-err-{token}\\n'; head -c {keep} <&9 | od -An -v -tx1; "
        'exit "$rc"'
    )


def command_output(token: str, body: str) -> tuple[str, str | None, bool]:
    """The command's stdout, its stderr (None where its shell did not hand it back: ended by Slurm, or
    killed) and whether its shell found no temp file for it, from the job's stdout after its start line.
    The shell's marker is its last copy (a command may print one; what follows the shell's is hex)."""
    if body.startswith(f"@@slurm-notemp-{token}\n"):
        return "", None, True
    mark = f"\n@@slurm-err-{token}\n"
    cut = body.rfind(mark)
    if cut < 0:
        return body, None, False
    hexed = body[cut + len(mark) :]
    try:
        stderr = bytes.fromhex(hexed).decode("utf-8", "replace")  # decoded as the login transport decodes
    except ValueError:
        stderr = hexed  # not the shell's hex (a process the command left behind wrote after it): as it came
    return body[:cut], stderr, False


def split_stderr(job: SlurmJob, text: str) -> str:
    """The command's stderr without srun's and slurmstepd's lines. Their last
    words may follow a last line the command left unterminated."""
    ending: list[str] = []
    while match := _SLURM_ENDING.search(text):
        ending.insert(0, match.group(0).rstrip("\n"))
        text = text[: match.start()]
    kept = []
    for line in text.splitlines(keepends=True):
        if _SLURM_LINE.match(line):
            job.messages.append(line.rstrip("\n"))
        else:
            kept.append(line)
    job.messages.extend(ending)
    return "".join(kept)


def no_controller(said: str, job: SlurmJob, srun: str) -> SlurmJobError:
    """The error for a job that never started whose record slurmctld did not give (stopped, or silent
    past squeue's timeout). Retried: the controller may be back by then."""
    return SlurmJobError(
        f"{said}: Slurm's controller (slurmctld) did not answer for the job's record (squeue: "
        f"{(job.unanswered or '')[-300:]}), so whether Slurm ended it is not known; not a verdict on the command"
        f"{srun}",
        job,
    )


def job_ident(job: SlurmJob) -> str:
    return f"Slurm job {job.job_id}" if job.job_id else f"Slurm job {job.name}"


def judge_ending(name: str, node: NodeSpec, job: SlurmJob, seconds: float, stuck_seconds: float = 0) -> None:
    """Raise for every ending that is Slurm's doing; return for the command's own (whose compute node
    SlurmTransport._check_pin judges next)."""
    said = "; ".join(m for m in job.messages if "error" in m or "CANCELLED" in m) or "; ".join(job.messages)
    srun = f" ({said[-400:]})" if said else ""
    ident = job_ident(job)
    where = f" on {job.compute_node}" if job.compute_node else ""
    why = f"; Slurm's reason: {job.reason}" if job.reason else ""
    if not job.started:
        if (unanswered := controller_unreachable(job, f"node {name!r}: {ident}")) is not None:
            raise unanswered
        if job.stuck is not None:
            job.reason = job.stuck
            raise SlurmStuck(
                f"node {name!r}: {ident} could not start in partition {node.partition!r}: Slurm's reason "
                f"{job.stuck}, which Slurm does not resolve by itself; cancelled by the farm once it had said so for "
                f"{stuck_seconds:g} s, not left waiting for its pending limit of {node.pending_limit} s"
                f"{pending_hint(job)}{srun}",
                job,
            )
        if job.state is None and job.unanswered is not None:
            raise no_controller(f"node {name!r}: {ident}", job, srun)
        if job.job_id is None or job.state == "FAILED":
            # what the node asked besides: Slurm's "Requested node configuration is not available" names
            # none of it, and "Invalid generic resource" no value (red-team round 174)
            keys = {"gres": node.gres, "constraint": node.constraint, "memory": node.memory}
            asked = "".join(f", {k} {v!r}" for k, v in keys.items() if v) + f", {job.minutes} min"
            raise SlurmRejected(
                f"node {name!r}: Slurm refused {ident} for partition {node.partition!r}{asked}"
                + (f", slurm_options {list(node.slurm_options)}" if node.slurm_options else "")
                + f"{why}{srun}",
                job,
            )
        if job.state in ("CANCELLED", None) and seconds >= node.pending_limit * 0.9:
            raise SlurmPendingLimit(
                f"node {name!r}: {ident} waited past its pending limit of {node.pending_limit} s "
                f"in partition {node.partition!r} and was withdrawn{why}{pending_hint(job)}{srun}",
                job,
            )
        if job.state in INFRA_STATES:
            raise _error_for(job.state)(
                f"node {name!r}: {ident}{where} {STATE_WORDS[job.state]} before its command started{why}{srun}",
                job,
            )
        raise SlurmJobError(
            f"node {name!r}: {ident} ended before its command started (state {job.state or 'unknown'}{why}){srun}",
            job,
        )
    # Slurm's memory limit, a step someone killed: Slurm's doing, whatever the record and the exit say
    if (killed := slurms_kill(job, f"node {name!r}: {ident}{where}", node.memory, srun)) is not None:
        raise killed
    # slurmstepd's word that Slurm ended the farm's step outweighs a record that reads a result
    final = job.state in RESULT_STATES or job.state == "COMPLETING"  # COMPLETING: its Epilog still runs
    ended = job.state if job.state in INFRA_STATES else ended_by_slurm(job) if final else None
    if ended is not None:
        record = f" (its record says {job.state})" if job.state and job.state != ended else ""
        raise _error_for(ended)(
            f"node {name!r}: {ident}{where} {STATE_WORDS[ended]} while it ran{record}{why}; "
            f"not a verdict on the command{srun}",
            job,
        )
    if (held := suspension(job, f"node {name!r}: {ident}{where}")) is not None:
        raise held
    if job.state in (None, "COMPLETING"):
        # Slurm no longer knows the job (a short MinJobAge, no accounting), or its final record is not
        # there yet (an Epilog outlasting the login side's wait): only srun's word is left.
        trouble = [m for m in job.messages if _SLURM_TROUBLE.search(m) and not of_commands_steps(job, m)]
        if trouble:
            raise SlurmJobError(
                f"node {name!r}: {ident}{where} ended abnormally "
                f"({'Slurm keeps no record of it' if job.state is None else 'its record still COMPLETING'}): "
                f"{'; '.join(trouble)[-400:]}",
                job,
            )
        # a controller gone silent while the job ran (squeue failing: job.unanswered) leaves srun's word
        # too, as a job Slurm keeps no record of: its command's own exit, where srun says nothing of
        # Slurm's, stands (red-team 87's rule; red-team 221's infra-error here broke it)
    elif job.state not in RESULT_STATES:
        gone = "; its srun returned while Slurm still had it: cancelled by the farm"
        gone = gone if job.state in UNSETTLED else ""
        raise SlurmJobError(f"node {name!r}: {ident}{where} ended in state {job.state}{gone}{why}{srun}", job)
