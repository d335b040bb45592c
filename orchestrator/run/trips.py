"""How a cell's stages travel to its node and come back: one round trip per stage,
or, where the transport streams, the cell's stages in one (CellTrips.send_together).

A cell is one round trip where the transport streams: build, inspect and run
go out as one command, the node starting each next stage only when the one
before it succeeded by its own reading (CellPipeline says how the farm still
judges each stage alone). Each stage's part sends back the files the farm
needs (build log, disassembly, the kernel's stdout and stderr) inside the
command's output (frames.py) before the next stage starts, and the run's part
removes the cell's folder as it ends. Where the node has python3 the trips go to
noderunner.py as a plan (the node's resident runner, resident.py, or a python3 of
the cell's own), else as shell. A transport that cannot stream a command's
output (Slurm) runs each stage in a round trip of its own and reads those files
in round trips of their own. What each stage's script holds, and what the farm
reads from what came back, is the stages' (stages/).
"""

from __future__ import annotations

import marshal
import re
import shlex
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from orchestrator.config.job_spec import VariantSpec
from orchestrator.config.jobs import Job
from orchestrator.errors import InfraError
from orchestrator.outcomes import CELL_STAGES
from orchestrator.run.cell import CellPaths
from orchestrator.run.commands import runner_command
from orchestrator.run.file_ends import read_back, with_framed
from orchestrator.run.frames import (
    CONTROL_LIMIT,
    HIDDEN_TOKEN,
    READ_TOKEN,
    FrameReader,
    emit,
    new_token,
    token_input,
)
from orchestrator.run.node_limits import forkless, out_of_processes, unless_forkless
from orchestrator.run.resident import ResidentRunner
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.run.stage_trip import Fetched, Trip, last_match
from orchestrator.run.together_script import together_script
from orchestrator.transport import CommandResult, Transport
from orchestrator.transport.base import Deadline
from orchestrator.transport.stdin_gate import stdin_hint

# a cell's stages by outcomes.CELL_STAGES' names (a stage added there is read here too); a round trip of
# several holds build, inspect and run (pipeline.py), sanitize one of its own, which the pattern allows
_STAGE = "|".join(map(re.escape, CELL_STAGES))
_SECTION = re.compile(rf"^@@farm section ({_STAGE}) (\d{{1,19}})$", re.M)
_RAN = rf"^@@farm ran((?: (?:{_STAGE}))*)$"
DAY_NS = 86400 * 10**9  # a node's clock may say anything: a stage's time is kept within a day


class CellTrips:
    """The round trips of one cell's stages (CellPipeline's base): what it needs of the
    cell is set by CellPipeline.__init__, and the hooks below are its."""

    t: Transport
    job: Job
    variant: VariantSpec
    snapshot: NodeSnapshot
    paths: CellPaths
    python: str | None
    resident: ResidentRunner | None
    marker_env: dict[str, str]
    cleaned: bool
    _plan_ahead: Callable[[], list[Trip]] | None
    _fetched: dict[str, Fetched | InfraError]
    _clock: tuple[datetime, float] | None

    def _release(self) -> None:
        raise NotImplementedError

    def _note_job(self) -> None:
        raise NotImplementedError

    def _clean_up(self) -> None:
        raise NotImplementedError

    def _reap_cell(self, tag: str = "leftover", start: str = "0") -> str:
        raise NotImplementedError

    def _wrap(self, script: str) -> str:
        # The script runs in a subshell, and the kernel as the same user could kill that
        # subshell before it prints its own status (and forge one, and a log, first):
        # its parent shell says how the subshell ended, having reaped the cell's
        # processes first when it did not end by itself (a script that ends by itself
        # has reaped them: scanning every process twice per stage costs a full node
        # dearly), and a script that did not end by itself is no evidence at all.
        return f'( {script} ); st=$?; if [ $st -ne 0 ]; then {self._reap_cell("reaped")}; fi; echo "@@farm end $st"'

    def _round_trip(self, trip: Trip) -> tuple[CommandResult, str]:
        """Run a stage's script and return its result and control text. Its files
        come back framed in the same round trip where the transport streams, else
        are read after it. `clean_up` removes the cell's folder once they are read;
        `release` frees the GPU when the script's own part has ended and its files
        start to come."""
        on_output = self._release if trip.release else None
        if self.t.streams_output:
            token = new_token()
            # the shell's frames name the token it read from its stdin (frames.READ_TOKEN), never its words
            sends = [emit(HIDDEN_TOKEN, tag, path, limit, tag in trip.ends) for tag, path, limit, _ in trip.files]
            tail = [self.paths.remove_run_dir() + " || true"] if trip.clean_up else []
            reader = FrameReader(token, {tag: sink for tag, _, _, sink in trip.files}, self.t.name, on_output)
            if self.python is not None and trip.spec is not None:
                outcome = self._run_plan(token, [trip], False, trip.timeout, reader.feed)
            else:
                script = READ_TOKEN + "; ".join([self._wrap(trip.shell()), *sends, *tail])
                outcome = self.t.run_streamed(script, timeout=trip.timeout, sink=reader.feed, stdin=token_input(token))
            control = reader.finish()
            self._check_files(trip, reader, outcome)
            self.cleaned = self.cleaned or trip.clean_up
            self._check_ended(control, outcome, trip.stage)
            return outcome, control
        command, token = with_framed(self._wrap(trip.shell()), trip.files, trip.ends)  # file_ends.py
        outcome = self.t.run(command, timeout=trip.timeout)
        self._check_ended(outcome.stdout, outcome, trip.stage)
        if on_output is not None:
            on_output()
        self._note_job()
        read_back(self.t, token, trip.files, trip.ends)
        if trip.clean_up:
            self._clean_up()
        return outcome, outcome.stdout

    def _run_plan(
        self, token: str, trips: list[Trip], together: bool, deadline: float | Deadline, sink: Callable[[bytes], None]
    ) -> CommandResult:
        """The trips run by noderunner.py: the node's resident runner where there is
        one (resident.py), else a python3 of the cell's own."""
        if self.resident is not None:
            plan = self._plan(token, trips, together, batched=True)
            cell = self.marker_env.get("FARM_CELL", "")
            return self.resident.run(
                plan, cell, deadline if isinstance(deadline, Deadline) else Deadline(deadline), sink
            )
        command, given = self._runner(token, trips, together)
        return self.t.run_streamed(command, timeout=deadline, sink=sink, stdin=given)

    def _plan(self, token: str, trips: list[Trip], together: bool, batched: bool = False) -> bytes:
        """What noderunner.py runs: the stages, their files and the cell's marker;
        `batched`: a resident runner serves it, which holds a cell's output for up to
        noderunner.HOLD s to send it in fewer messages, so every stage's start is
        written as it begins (the farm hears it within HOLD s)."""
        plan = {
            "token": token,
            "together": together,
            "batched": batched,
            "marker": self.marker_env,
            "stages": [
                {
                    "stage": trip.stage,
                    "timeout": trip.timeout,  # what the farm allows it once it has read its start
                    "spec": trip.spec,
                    "files": [[tag, path, limit, tag in trip.ends] for tag, path, limit, _ in trip.files],
                    "clean_up": trip.clean_up,
                }
                for trip in trips
            ],
        }
        # marshal: read without an import by any python3 from 3.4 on (version 4), plain data only
        return marshal.dumps(plan, 4)

    def _runner(self, token: str, trips: list[Trip], together: bool) -> tuple[str, bytes]:
        """The command starting noderunner.py on the node, and its stdin: the
        runner's source, then the plan. Only the bootstrap is on the command line;
        the runner carries the run's marker (a stop kills it), not the cell's (its
        own reap of the cell's leftovers spares it)."""
        marker = self.marker_env
        run = f"FARM_RUN={shlex.quote(marker['FARM_RUN'])} " if "FARM_RUN" in marker else ""
        assert self.python is not None
        # a runner that did not end by itself (killed, by the kernel or the node) enforced no limit
        # and reaped nothing: the login's shell kills what is left of the cell, as `_wrap` does
        # (in a subshell, as the shell scripts' stages are: the kernel's SHLVL is theirs)
        start, runner = runner_command(self.python, self.snapshot.python_version, self.snapshot.runner_code)
        command = f"( {run}{start} ); [ $? -eq 0 ] || {{ {self._reap_cell('reaped')}; }}"
        return command, runner + self._plan(token, trips, together)

    def _check_files(self, trip: Trip, reader: FrameReader, outcome: CommandResult) -> None:
        missing = [tag for tag, *_ in trip.files if tag not in reader.frames]
        if missing:
            raise InfraError(
                f"node {self.t.name!r}: the stage's script ended before sending back its {', '.join(missing)} "
                + stdin_hint(f"({outcome.stderr.strip()[-300:]!r})")
            )

    def _go(self, stage: str, plan: Callable[[], Trip]) -> tuple[Trip, CommandResult, str]:
        """The stage's round trip, or its part of the one that went ahead (then with
        the trip that went, whose sinks hold its files)."""
        if self._plan_ahead is not None:
            ahead, self._plan_ahead = self._plan_ahead(), None
            self._send_together([plan(), *ahead])
        fetched = self._fetched.pop(stage, None)
        if fetched is None:
            self._fetched.clear()  # a trip of its own: whatever went ahead of it is stale
            self._clock = None
            trip = plan()
            outcome, text = self._round_trip(trip)
            return trip, outcome, text
        if isinstance(fetched, InfraError):
            self._fetched.clear()
            raise fetched
        self._clock = (fetched.started_at, fetched.seconds)
        return fetched.trip, fetched.outcome, fetched.text

    def _send_together(self, trips: list[Trip]) -> None:
        """One round trip for several stages; each next one runs on the node only
        when the one before it succeeded there. Each stage's control text comes
        back as a frame of its own (ctl-STAGE), and the command's last line, printed
        from the shell's own variables once nothing of the cell is left to write,
        says which stages ran: a stage it does not name is no evidence, whatever
        frames someone else printed for it. Each stage's part is kept for its
        turn (`_go`), with its timing."""
        token = new_token()
        last = trips[-1]
        controls = {trip.stage: bytearray() for trip in trips}

        def keep(into: bytearray) -> Callable[[bytes], None]:
            return lambda chunk: into.extend(chunk[: max(CONTROL_LIMIT - len(into), 0)])

        sinks = {tag: sink for trip in trips for tag, _, _, sink in trip.files}
        sinks.update({f"ctl-{stage}": keep(text) for stage, text in controls.items()})
        release = [tag for tag, *_ in last.files] if last.release else []
        reader = FrameReader(token, sinks, self.t.name, self._release if release else None, first_of=release)
        # each stage gets its own budget as the node starts it, as it would in a trip of its own
        deadline = Deadline(trips[0].timeout)
        coming = [(f"@@farm section {t.stage} ".encode(), t.timeout) for t in trips[1:]]
        seen = 0

        def feed(chunk: bytes) -> None:
            nonlocal seen
            reader.feed(chunk)
            control = reader.control_bytes
            if coming and len(control) > seen:
                while coming and control.find(coming[0][0], max(seen - 64, 0)) >= 0:
                    deadline.extend(coming.pop(0)[1])
                seen = len(control)

        sent = datetime.now(UTC)
        error: InfraError | None = None
        outcome = CommandResult("", -1, "", "", 0.0)
        by_runner = self.python is not None and all(trip.spec is not None for trip in trips)
        try:
            if by_runner:
                outcome = self._run_plan(token, trips, True, deadline, feed)
            else:
                # the cell's processes are gone before the last line: the run reaps its own after the
                # kernel; a cell that stopped before its run has its build's and inspect's reaped here
                swept = self._reap_cell("swept")
                script = together_script(trips, HIDDEN_TOKEN, self._wrap, swept, self.paths, self.variant.instructions)
                outcome = self.t.run_streamed(
                    READ_TOKEN + script, timeout=deadline, sink=feed, stdin=token_input(token)
                )
            control = reader.finish()
        except InfraError as err:  # a file cut short: by a node out of processes, maybe (node_limits.py)
            error, control = unless_forkless(err, self.t.name, "cell's script", outcome.stderr), reader.control
        # the shell's last line names its token (together_script), the runner's is its own stream's
        said = last_match(_RAN if by_runner else _RAN.replace("ran(", f"ran {token}(", 1), control)
        if error is None and said is None:
            error = InfraError(
                f"node {self.t.name!r}: the cell's command never said which stages it ran "
                + stdin_hint(
                    f"(killed, by the kernel or the node): no evidence from it ({outcome.stderr.strip()[-200:]!r})"
                )
            )
            error.retryable = False
        ran = said.group(1).split() if said is not None and error is None else []
        marks: dict[str, re.Match[str]] = {}
        for found in _SECTION.finditer(control):
            marks.setdefault(found.group(1), found)
        origin = int(marks[trips[0].stage].group(2)) if trips[0].stage in marks else 0
        for trip in trips:
            if trip.stage not in ran:
                if error is not None:
                    # the stage the node was at, by its (unchecked) marker: where the error is told
                    at = [t.stage for t in trips if t.stage in marks] or [trips[0].stage]
                    error.stage = at[-1]
                    self._fetched[trips[0].stage] = error
                break
            text = controls[trip.stage].decode("utf-8", "replace")
            mark = marks.get(trip.stage)
            ended = last_match(rf"^@@farm section-end {trip.stage} (\d{{1,19}})$", control)
            start = int(mark.group(2)) if mark else origin
            try:
                if f"ctl-{trip.stage}" not in reader.frames:
                    raise InfraError(f"node {self.t.name!r}: the {trip.stage} stage ran but sent back no status")
                self._check_files(trip, reader, outcome)
                self._check_ended(text, outcome, trip.stage)
            except InfraError as err:
                self._fetched[trip.stage] = err
                break
            self._fetched[trip.stage] = Fetched(
                trip,
                outcome,
                text,
                sent + timedelta(seconds=min(max(start - origin, 0), DAY_NS) / 1e9),
                min(max(int(ended.group(1)) - start, 0), DAY_NS) / 1e9 if ended else 0.0,
            )
            if trip is last and trip.clean_up:
                self.cleaned = True

    def _check_ended(self, control: str, outcome: CommandResult, stage: str) -> None:
        ended = last_match(r"^@@farm end (\d+)$", control)
        if ended is None or ended.group(1) != "0":
            if said := forkless(outcome.stderr):  # its shell never started, or could not go on: node_limits.py
                raise InfraError(out_of_processes(self.t.name, f"{stage} stage", said))
            error = InfraError(
                f"node {self.t.name!r}: the stage's shell on the node "
                + (f"ended with status {ended.group(1)}" if ended else "never said how it ended")
                + " before it finished (killed, by the kernel or the node): no evidence from it"
                + f" ({(outcome.stderr or control).strip()[-200:]!r})"
            )
            error.retryable = False
            raise error
