"""A Slurm partition as a node: every command is a job, submitted from a login node.

The login node is reached the way any node is: over SSH with the node's own
`host`, `port`, `user`, `key_file`, `known_hosts` and `jump`, or, when `host`
is absent, on the farm's own machine. put() and read() act on the login node,
so the node's `workdir` must be on a filesystem the compute nodes share (home
or a cluster filesystem; the probe creates it from a compute node).

Every run(command) is one Slurm job, started from the login node as

    srun --partition=P --nodes=1 --ntasks=1 --time=MIN
        --immediate=PENDING_LIMIT --job-name=farm-NODE-TOKEN --input=none
        --export=ALL [--gres=G] [--constraint=C] [slurm_options...] [--nodelist=PINNED]
        sh -c 'export SLURM_OVERLAP=1; printf "@@slurm-start-TOKEN %s %s %s\\n" "$SLURM_JOB_ID"
            "$SLURMD_NODENAME" "(the GPU models nvidia-smi lists)"; COMMAND'
    rc=$?; printf '\\n@@slurm-end-TOKEN %s\\n' $rc; (the job's record from squeue, else sacct)

in one round trip. Everything is a job (the probe, staging, build, inspect,
run, clean-up): each command a stage sends then runs where the probed GPU,
driver and nvcc are, and the transport needs no knowledge of what a command
is for. A partition's compute nodes may differ (a T4 node beside an A100
node, another driver or nvcc), so the first job that starts (the probe) pins
the transport and its siblings: every later job asks for its compute node
(--nodelist, after slurm_options) and one whose shell reports another node,
or other GPU models than the first job saw there, is an InfraError, never a
result. The node's `env` goes to the login node's shell on its stdin (env_input.py), never on its
command line, which every user of the login node reads for as long as the job pends and runs (a
red-team finding); that shell exports it for its srun, squeue and scancel, and it travels into the
job with --export=ALL (so SLURM_CONF in `env` also picks the cluster).

Outcomes come from Slurm's record of the job, not from srun's exit status (an
srun whose node failed under it exits 0): COMPLETED and FAILED are the
command's own result, its exit code unchanged; a job withdrawn at its pending
limit, refused at submission, CANCELLED, NODE_FAIL, BOOT_FAIL, PREEMPTED,
DEADLINE or TIMEOUT is an InfraError, never a kernel verdict. srun's and
slurmstepd's own lines are taken out of stderr (kept in `last_job.messages`).

After each run() `last_job` (and `last_job_id`, `last_compute_node`) say
which job it was and which compute node ran it; `jobs` lists every job the
transport submitted, in order.
"""

from __future__ import annotations

import contextlib
import math
import re
import secrets
import shlex
import time
from collections.abc import Iterator
from pathlib import Path

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import CommandTimeout, InfraError, NodeUnusable
from orchestrator.transport.base import CommandResult, Transport
from orchestrator.transport.slurm_ending import (
    command_output,
    job_ident,
    judge_ending,
    own_stderr,
    read_submission,
    split_stderr,
)
from orchestrator.transport.slurm_jobs import (  # noqa: F401 - SlurmRejected, SlurmCancelled, SlurmPendingLimit, SlurmStuck: the module's API
    SlurmCancelled,
    SlurmJob,
    SlurmJobError,
    SlurmPendingLimit,
    SlurmRejected,
    SlurmStuck,
    SlurmTimeLimit,
    within_time_limit,
)
from orchestrator.transport.slurm_query import UNSETTLED, deadline_setting, record_query, stop_script, stuck_watch

# Seconds the login node's side may take beyond the job's own wait and run:
# srun's start-up, the job's completion, the state query.
SUBMIT_MARGIN = 45.0
# How long the state query waits for a finished job to leave RUNNING, PENDING... (0.25 s steps);
# COMPLETING (an Epilog running) up to the login side's own budget (slurm_query.record_query)
SETTLE_POLLS = 80
SCANCEL_TIMEOUT = 30.0
STOP_QUERIES = 4  # tries at squeue when a stop looks for the run's jobs
# A pending job whose reason Slurm never resolves by itself (held, partition down, node drained:
# slurm_query.STUCK_REASONS) is cancelled once it has said so for this long, asked every STUCK_POLL_S
STUCK_SECONDS = 15.0
STUCK_POLL_S = 5.0  # an squeue a pending job this often, of the login user's jobs alone (slurm_query.SQUEUE_USER)


# what the job's shell sees: "name, cc" of each GPU, ";" after each (a job may see only the GPU Slurm
# gave it, and the next job another, of another model: a red-team finding); bounded, as the probe's is
_CARDS = (
    '$(t=; command -v timeout >/dev/null 2>&1 && t="timeout 20"; $t nvidia-smi '
    "--query-gpu=index,uuid,name,compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null "
    '| cut -s -d, -f3,4 | tr "\\n" ";")'
)


# the login shell's words for a Slurm client it cannot find (dash: "sh: 1: srun: not found"; bash:
# "bash: line 1: srun: command not found"): the login node's PATH, not slurmctld (red-team 231)
_NOT_FOUND = re.compile(r"^[^\n]*?\b(srun|squeue): (?:command )?not found$", re.M)


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60) + 1)


class SlurmTransport(Transport):
    """A partition reached through a login node; one Slurm job per command."""

    def __init__(self, name: str, node: NodeSpec, run_token: str | None = None) -> None:
        super().__init__(name, node, run_token)
        # The login node: the node's SSH fields, or the farm's own machine. Its copy of the node
        # keeps the env: the login transport hands it to each shell on stdin (env_input.py), whose
        # srun passes it on to the job (--export=ALL), and its squeue and scancel read it too
        if node.host:
            from orchestrator.transport.ssh import SSHTransport

            self._login: Transport = SSHTransport(name, node.model_copy(update={"transport": "ssh"}))
        else:
            from orchestrator.transport.local import LocalTransport

            self._login = LocalTransport(name, node.model_copy(update={"transport": "local"}))
        self.jobs: list[SlurmJob] = []
        self.last_job: SlurmJob | None = None
        # the compute node of the first job that started (the probe's): the node whose card,
        # driver and nvcc the farm read, where every later job must run (a red-team finding)
        self.pinned: str | None = None
        self.pinned_cards: tuple[str, ...] = ()  # the GPU models that first job saw there

    streams_output = False  # a job's output comes back through srun as text: files are read separately
    pins_gpus = False  # Slurm places each job on a compute node (and, asked for one with gres, picks its GPU)

    def sibling(self) -> SlurmTransport:
        twin = type(self)(self.name, self.node, self.run_token)
        # a cell worker's jobs go where the probe's went, to the cards it saw
        twin.pinned, twin.pinned_cards = self.pinned, self.pinned_cards
        return twin

    @property
    def last_job_id(self) -> str | None:
        return self.last_job.job_id if self.last_job else None

    @property
    def last_compute_node(self) -> str | None:
        return self.last_job.compute_node if self.last_job else None

    # lifecycle ------------------------------------------------------------
    def _connect(self) -> None:
        self._login.open()

    def _disconnect(self) -> None:
        self._login.close()

    def _put(self, local: Path, remote: str) -> None:
        self._login.put(local, remote)

    def _read(self, remote: str, limit: int) -> bytes:
        return self._login.read(remote, limit)

    def _stream(self, remote: str, limit: int, chunk: int) -> Iterator[bytes]:
        return self._login.stream(remote, limit, chunk)

    # commands -------------------------------------------------------------
    def _with_env(self, command: str) -> str:
        return command  # the login transport hands the env to the job's shell on the login node (__init__)

    def srun_arguments(self, job_name: str, timeout: float) -> list[str]:
        node = self.node
        minutes = node.time_limit or _minutes(timeout)
        args = [
            "srun",
            f"--partition={node.partition}",
            "--nodes=1",
            "--ntasks=1",
            f"--time={minutes}",
            f"--immediate={node.pending_limit}",
            f"--job-name={job_name}",
            "--input=none",
            "--export=ALL",
        ]
        if node.gres:
            args.append(f"--gres={node.gres}")
        if node.constraint:
            args.append(f"--constraint={node.constraint}")
        if node.memory:
            args.append(f"--mem={node.memory}")
        # the pin comes last: a --nodelist or -w among slurm_options cannot send a job elsewhere
        return args + list(node.slurm_options) + ([f"--nodelist={self.pinned}"] if self.pinned else [])

    def _submission(self, command: str, token: str, job_name: str, timeout: float) -> str:
        # a run's own `srun {binary}` is a step inside this one, which holds the allocation: without
        # --overlap it waits for resources until the cell's timeout (a red-team finding)
        start = (
            f'export SLURM_OVERLAP=1; printf "@@slurm-start-{token} %s %s %s\\n" "$SLURM_JOB_ID" "$SLURMD_NODENAME" '
            f'"{_CARDS}"; '
        )
        srun = " ".join(
            shlex.quote(a)
            for a in [*self.srun_arguments(job_name, timeout), "sh", "-c", own_stderr(start, command, token)]
        )
        query = record_query(job_name, token, SETTLE_POLLS)
        deadline = deadline_setting(self._budget(timeout))
        watch = stuck_watch(job_name, token, max(1, math.ceil(STUCK_SECONDS / STUCK_POLL_S)), STUCK_POLL_S)
        return (
            f"{deadline}{watch}{srun}; rc=$?; kill $farm_w 2>/dev/null; "
            f"printf '\\n@@slurm-end-{token} %s\\n' \"$rc\"; {query}"
        )

    def _budget(self, timeout: float) -> float:
        """The login side's wait for a job: its own run, its pending limit and srun's margin."""
        return timeout + self.node.pending_limit + SUBMIT_MARGIN

    def _run(self, command: str, timeout: float) -> CommandResult:
        token = secrets.token_hex(6)
        run = f"{self.run_token}-" if self.run_token else ""
        job = SlurmJob(name=f"farm-{self.name}-{run}{token}", minutes=self.node.time_limit or _minutes(timeout))
        self.last_job = job
        self.jobs.append(job)
        script = self._submission(command, token, job.name, timeout)
        clock = time.monotonic()
        try:
            outcome = self._login.run(script, timeout=self._budget(timeout))
        except CommandTimeout as err:
            state, words = self._left_behind(job)
            self._cancel(job)
            waited = f"{timeout:.0f} s (+{self.node.pending_limit} s pending limit, +{SUBMIT_MARGIN:g} s margin)"
            # only a job Slurm still runs or holds outlived its time: srun hung on a job that ended
            # (a compute node's slurmstepd lost) or on Slurm's daemons (munge, slurmctld) is a passing fault
            kind = SlurmTimeLimit if state in UNSETTLED else SlurmJobError
            raise kind(
                f"node {self.name!r}: Slurm job {job.name}: its srun on the login node had not returned after "
                f"{waited}; {words}; cancelled ({err})",
                job,
            ) from err
        seconds = time.monotonic() - clock
        stdout, rc = read_submission(self.name, job, token, outcome.stdout)
        stdout, own, no_temp = command_output(token, stdout)
        stderr = split_stderr(job, outcome.stderr)
        if own is not None:
            # what else srun's stderr held came from the job's surroundings (a prolog), not the command
            job.messages.extend(line for line in stderr.splitlines() if line.strip())
            stderr = own
        if job.state in UNSETTLED and job.state != "COMPLETING":
            # srun is gone (killed on the login node) while Slurm still runs the job: left alone it
            # holds its compute node's GPU until its time limit, and the next job waits behind it
            self._cancel(job)
        if not job.started and job.job_id is None and (missing := _NOT_FOUND.search(outcome.stderr)):
            # the login shell found no srun or squeue: before, "slurmctld did not answer", retried each cell
            raise NodeUnusable(
                f"node {self.name!r}: Slurm's {missing.group(1)} is not on the login node's PATH for the farm's "
                f"shell ({missing.group(0).strip()[:200]}): set PATH in the node's `env` to include Slurm's bin "
                "folder (a non-interactive shell reads no login profile); not a verdict on the command"
            )
        try:
            self._judge(job, rc, seconds)
        except SlurmTimeLimit as err:
            raise within_time_limit(err, self.node.time_limit, timeout)  # noqa: B904 - err itself, or err said again
        if no_temp and rc == 125:
            # the command never ran: its shell had no file to keep its stderr from srun's (slurm_ending.own_stderr)
            raise SlurmJobError(
                f"node {self.name!r}: {job_ident(job)} on {job.compute_node}: the job's shell could not make a "
                "temporary file (mktemp, in $TMPDIR or /tmp) for the command's stderr, so the command did not run "
                f"({stderr.strip()[-300:]}); not a verdict on the command",
                job,
            )
        return CommandResult(command=command, exit_code=rc, stdout=stdout, stderr=stderr, seconds=seconds)

    def stop_run(self, token: str, timeout: float) -> int:
        """scancel every job of the run `token` (its jobs' names carry it), pending
        or running, on any compute node; returns how many jobs."""
        self._require_open("stop_run")
        if not re.fullmatch(r"[0-9a-f]+", token):  # a glob in a case pattern: it must be unquoted
            raise ValueError(f"run token {token!r} is not hex")
        out = self._login.run(stop_script(token, timeout, STOP_QUERIES), timeout=timeout).stdout
        match = re.search(r"@@farm cancelled (\d+)", out)
        if match is None:
            said = out.strip().splitlines()[-1:] or ["no answer"]
            raise InfraError(f"node {self.name!r}: the run's Slurm jobs were not cancelled ({said[0][:300]})")
        return int(match.group(1))

    def _judge(self, job: SlurmJob, rc: int, seconds: float) -> None:
        """Raise for every ending that is Slurm's doing, or a result from another card than the probe's."""
        judge_ending(self.name, self.node, job, seconds, STUCK_SECONDS)
        self._check_pin(job, job_ident(job))

    def _check_pin(self, job: SlurmJob, ident: str) -> None:
        """A command's result counts only from the compute node the first job ran on: from
        another, it is no verdict on the card the farm read there."""
        if job.compute_node is None or self.pinned not in (None, job.compute_node):
            error = SlurmJobError(
                f"node {self.name!r}: {ident} ran on {job.compute_node or 'a compute node it did not name'}"
                + (f", not on {self.pinned}, the compute node the probe read" if self.pinned else "")
                + ": not a verdict on the command",
                job,
            )
            error.retryable = False  # the same request is placed the same way
            raise error
        if self.pinned is not None and job.cards != self.pinned_cards:
            # the same node, another of its GPUs, of another model: what the probe read is not what ran.
            # Retried: the GPU the probe's job had may be free by then
            seen = "; ".join(job.cards) or "no GPU"
            raise SlurmJobError(
                f"node {self.name!r}: {ident} on {job.compute_node} saw {seen}, not {'; '.join(self.pinned_cards)}"
                " as the probe's job did: not a verdict on the command",
                job,
            )
        self.pinned, self.pinned_cards = job.compute_node, job.cards

    def _left_behind(self, job: SlurmJob) -> tuple[str | None, str]:
        """Slurm's state of a job whose srun did not return in time, and words for it: "still running
        after N s" had been said of a job that had ended, or that Slurm could not be asked about."""
        try:
            said = self._login.run(f"squeue -h -n {shlex.quote(job.name)} -o %T 2>&1", timeout=SCANCEL_TIMEOUT)
        except InfraError as err:
            return None, f"whether the job still runs is not known (squeue: {str(err)[-200:]})"
        words = said.stdout.strip()
        if said.exit_code != 0:
            return None, (
                f"Slurm could not be asked whether the job still runs (squeue: {words[-200:]}): "
                "a Slurm daemon (munge, slurmctld) may be down"
            )
        state = words.splitlines()[-1].strip() if words else None
        if state in UNSETTLED:
            return state, f"Slurm still has the job {state}"
        if state is None:
            return None, "Slurm no longer lists the job: it ended, but srun never said so (slurmstepd or munge lost?)"
        return state, f"the job ended ({state}), but srun never said so (slurmstepd or munge lost?)"

    def _cancel(self, job: SlurmJob) -> None:
        """Best effort: a job whose srun was killed keeps running otherwise."""
        with contextlib.suppress(InfraError):
            self._login.run(f"scancel --name={shlex.quote(job.name)}", timeout=SCANCEL_TIMEOUT)
