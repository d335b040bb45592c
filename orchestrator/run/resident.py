"""The resident runner: one python3 per node, serving all of the run's cells there.

A cell's stages go to noderunner.py as a plan, and without this module each
cell starts a python3 of its own on its own SSH channel: on a node that is a
third of what a cell costs it (the interpreter's start, sshd's session and
shell). Here the node's python3 is started once, on one channel that stays
open (`noderunner.serve`), and forks a child per cell, which has the runner
loaded already. The children's output comes back on that channel, each chunk
tagged with its cell, and is handed to the cell's thread, which reads it with
the same parsers as a channel of its own: the cell's frames, its control text
and its evidence rules are unchanged, and so is the trust (the plan, with its
frame token, goes from the farm's memory to the node's, never to a file or a
command line).

Failures stay with what they concern: a cell's deadline kills that cell's
child (`k ID`) and is the cell's CommandTimeout, and so is a serving runner
that says nothing for SILENT_LIMIT s with the cell in flight (it says `b` every
BEAT s while it has cells: a node frozen or cut off is found by its silence,
not only once the budget of the stage it froze in has passed); a runner that ends, whose
channel breaks or whose stream is not its own (a process of the same user wrote
into it) is a SessionLost for each cell it was serving (infra, retried like any
lost session), once the farm has killed it, its children and their cells'
processes where the node still answers (so no cell of it goes on beside its
retry), and the next cell starts a new one.

Its protocol, both ways, is described in noderunner.py.
"""

from __future__ import annotations

import itertools
import queue
import secrets
import shlex
import threading
import time
from collections.abc import Callable
from importlib.util import MAGIC_NUMBER

from orchestrator.errors import CommandTimeout, ConnectError, InfraError, NodeUnusable, SessionLost
from orchestrator.run.probe import RUNNER_SOURCE
from orchestrator.run.runner_code import compiled, squeezed
from orchestrator.transport.base import ANSWER_WAIT, CommandResult, Deadline, Process, Transport, reap
from orchestrator.transport.ssh_watchdog import WATCHDOG
from orchestrator.transport.stdin_gate import STDIN_HINT

STDERR_KEEP = 1 << 16  # bytes of a cell's stderr kept
QUEUED_CHUNKS = 1024  # messages (4 KB at most) held for a cell whose thread lags
HEADER_LIMIT = 64  # a longer header line is not the runner's
MARK_SIZE = 32  # hex characters of the secret each of the runner's messages starts with
HEARTBEAT = 20.0  # seconds between the farm's `h`: the runner hears it is still there
IDLE_LIMIT = 120.0  # seconds unheard after which an idle runner ends (the farm's connection cut)
BEAT = 3.0  # seconds a runner with cells in flight may say nothing before it says `b`
SILENT_LIMIT = 20.0  # seconds of its silence, with a cell in flight, after which the node is taken for gone
LOST_KILL_TIMEOUT = 30.0  # seconds for killing what is left of a lost runner
# seconds a started runner may take to say its group (its first message): the probe's own budget
# (probe.PROBE_TIMEOUT). One whose stdin a login's background reader took waits for it forever,
# and the probe's request, bounded by the folders' 660 s, outlived every budget (review 128)
START_LIMIT = 60.0


class RunnerMute(NodeUnusable):
    """The runner never said its group: not retried (the same login takes its stdin again)."""


def resident_command(python: str, run_token: str | None, mark: str) -> tuple[str, bytes]:
    """The command starting noderunner.serve, and the first bytes of its stdin: the
    stream's mark (MARK_SIZE characters, kept from the command line, where any
    process may read it), the runner compiled by the farm, and its source, each
    zlib-compressed (once per process: runner_code.squeezed). Read with os.read,
    not sys.stdin: a buffered read could take requests with them. A python3 older
    than 3.8 says so and ends before its first message."""
    code, source = squeezed(compiled(RUNNER_SOURCE)), squeezed(RUNNER_SOURCE, 9)
    boot = (
        "import os, sys, marshal\n"
        "if sys.version_info < (3, 8):\n"
        "    raise SystemExit('farm-runner: python3 ' + sys.version.split()[0] + ' is older than 3.8')\n"
        "def r(n):\n"
        "    b = b''\n"
        "    while len(b) < n:\n"
        "        c = os.read(0, n - len(b))\n"
        "        if not c: raise SystemExit('farm-runner: stdin ended early')\n"
        "        b += c\n"
        "    return b\n"
        f"STREAM_MARK = r({MARK_SIZE}).decode(); c = r({len(code)}); s = r({len(source)})\n"
        "import zlib\n"
        "m = getattr(sys.modules.get('_frozen_importlib_external'), 'MAGIC_NUMBER', None)\n"
        f"exec(marshal.loads(zlib.decompress(c)) if m == {MAGIC_NUMBER!r} else "
        "compile(zlib.decompress(s), 'farm-runner', 'exec'))\n"
    )
    run = f"FARM_RUN={shlex.quote(run_token)} " if run_token else ""
    given = mark.encode() + code + source
    serve = f"serve {IDLE_LIMIT:g} {BEAT:g}"
    return f"{run}exec {shlex.quote(python)} -I -S -c {shlex.quote(boot)} {serve}", given


class _Served:
    """A cell in flight: what came for it, in order."""

    def __init__(self, cell: str) -> None:
        self.cell = cell  # its FARM_CELL marker
        self.chunks: queue.Queue[tuple[str, bytes | int | str]] = queue.Queue(QUEUED_CHUNKS)
        self.gone = False  # its thread no longer reads them (its deadline passed)


class ResidentRunner:
    """A node's resident runner, shared by its cells' threads; started on first use
    (the node's probe, probe.resident_probe), and again after it was lost."""

    def __init__(
        self,
        transport: Transport,
        python: str,
        open_transport: Callable[[Transport], None],
    ) -> None:
        self._transport = transport  # a transport of its own (a sibling sharing the node's connection)
        self.python = python  # "python3" (found on the node's PATH) until the probe says which it is
        self._open_transport = open_transport  # the farm's handshake gate
        self._lock = threading.Lock()  # starting, and writing requests
        self._process: Process | None = None
        self._group: dict[Process, int] = {}  # a runner's process group, as it said
        self._quiet: dict[Process, threading.Event] = {}  # set when a runner's heartbeat must stop
        self._served: dict[int, _Served] = {}
        self._listening: dict[Process, float] = {}  # since when a runner's reader has waited for a byte
        self._began: dict[Process, float] = {}  # when each runner was started
        self._ids = itertools.count(1)
        self._closed = False

    @property
    def name(self) -> str:
        return self._transport.name

    # the cell's side ---------------------------------------------------------
    def run(self, plan: bytes, cell: str, deadline: Deadline, sink: Callable[[bytes], None]) -> CommandResult:
        """One cell's plan (its FARM_CELL marker `cell`) run on the node, its stdout
        handed to `sink` as it comes: what Transport.run_streamed gives for a
        runner of its own."""
        start = time.monotonic()
        ident = next(self._ids)
        served = _Served(cell)
        with self._lock:
            process = self._running()
            sent = time.monotonic()
            self._served[ident] = served
            try:
                process.send(b"r %d %d\n" % (ident, len(plan)) + plan)
            except SessionLost:
                self._lost(process, "it takes no more requests")
                raise
        stderr = bytearray()
        try:
            while True:
                left = deadline.left()
                if left <= 0:
                    served.gone = True
                    self._kill(ident)
                    raise CommandTimeout(f"node {self.name!r}: command still running after {deadline.budget:.0f} s")
                try:
                    kind, value = served.chunks.get(timeout=min(left, 1.0))
                except queue.Empty:
                    if WATCHDOG.cut_passed():
                        # a stop whose kill gave no end by its cut: the node is cut off or frozen (the cell waited
                        # out its budget: red-team 207); its entry goes first, so _lost kills nothing on the dead link
                        served.gone = True
                        with self._lock:
                            self._served.pop(ident, None)
                        process.drop()
                        raise CommandTimeout(
                            f"node {self.name!r}: the run was stopped and the node gave no end of this cell "
                            "since (its resident runner's connection closed)"
                        ) from None
                    # how long its reader has waited on the node (a reader busy handing on what came
                    # is not waiting), counted from this cell's request at the earliest, once the
                    # runner is serving (it said its group): a python3 still starting, on a node
                    # busy with many logins at once, beats nothing yet, and has START_LIMIT
                    waiting = self._listening.get(process)
                    serving = process in self._group
                    silent = 0.0 if waiting is None or not serving else time.monotonic() - max(waiting, sent)
                    if not serving and time.monotonic() - self._began.get(process, sent) > START_LIMIT:
                        served.gone = True
                        self._mute(process)
                    if silent > SILENT_LIMIT:
                        served.gone = True
                        with self._lock:
                            # frozen (its session stopped, the node's listener up): the retries went to
                            # it again, each waiting out the silence (a red-team finding); it is taken
                            # for lost, killed over a fresh connection, and the next cell starts another
                            if self._process is process:
                                self._lost(process, f"it said nothing for {silent:.0f} s")
                        raise CommandTimeout(
                            f"node {self.name!r}: its resident runner said nothing for {silent:.0f} s with "
                            f"this cell in flight (it says it is there every {BEAT:g} s): the node froze or "
                            "was cut off"
                        ) from None
                    continue
                if kind == "o":
                    assert isinstance(value, bytes)
                    sink(value)
                elif kind == "e":
                    assert isinstance(value, bytes)
                    stderr += value[: max(STDERR_KEEP - len(stderr), 0)]
                elif kind == "x":
                    assert isinstance(value, int)
                    return CommandResult(
                        "farm-runner (resident)", value, "", stderr.decode("utf-8", "replace"), time.monotonic() - start
                    )
                else:
                    raise SessionLost(f"node {self.name!r}: {value}")
        finally:
            served.gone = True
            with self._lock:
                self._served.pop(ident, None)

    def _mute(self, process: Process) -> None:
        """A runner that did not say its group within START_LIMIT is given up on, its channel closed
        (its python3 then reads the end of its stdin and ends), and the node with it."""
        with self._lock:
            if self._process is process:
                self._lost(process, f"it said nothing within {START_LIMIT:g} s of its start")
        said = process.stderr().strip()[-300:]
        if not process.answers(ANSWER_WAIT):  # not a login's stdin reader: the node is gone (red-team 199)
            process.close()
            raise ConnectError(
                f"node {self.name!r}: the resident runner said nothing within {START_LIMIT:g} s of its start, "
                f"and the node stopped answering (its SSH connection answered no keepalive in {ANSWER_WAIT:g} s): "
                "frozen, or cut off from the farm (its packets to the farm dropped)"
            )
        process.close()
        raise RunnerMute(
            f"node {self.name!r}: the resident runner did not answer within {START_LIMIT:g} s of its start"
            f"{' (' + said + ')' if said else ''}: {STDIN_HINT}"
        )

    def close(self) -> None:
        """Its stdin ends (it ends once its children have) and its channel goes."""
        with self._lock:
            self._closed = True
            process, self._process = self._process, None
            for quiet in self._quiet.values():
                quiet.set()
        if process is not None:
            process.close()
        self._transport.close()

    # the runner's side -------------------------------------------------------
    def _running(self) -> Process:
        """The live runner, started if there is none (called under the lock)."""
        if self._closed:
            raise InfraError(f"node {self.name!r}: its resident runner was closed")
        if self._process is not None:
            return self._process
        mark = secrets.token_hex(MARK_SIZE // 2)  # a new one per runner: one that leaked dies with it
        command, given = resident_command(self.python, self._transport.run_token, mark)
        self._open_transport(self._transport)
        process = self._transport.start(command)
        try:
            process.send(given)
        except SessionLost:
            process.close()
            self._transport.close()  # reconnects on next use
            raise
        self._process = process
        self._began[process] = time.monotonic()
        reader = threading.Thread(
            target=self._read, args=(process, mark.encode() + b" "), daemon=True, name=f"{self.name}-resident-reader"
        )
        reader.start()
        self._quiet[process] = quiet = threading.Event()
        beating = f"{self.name}-resident-beat"
        threading.Thread(target=self._beat, args=(process, quiet), daemon=True, name=beating).start()
        return process

    def _beat(self, process: Process, quiet: threading.Event) -> None:
        """`h` every HEARTBEAT seconds while this runner is the node's: its thread
        ends with the runner (a thread left sleeping would keep the next run's
        workers from being forked: workers.start_method)."""
        while not quiet.wait(HEARTBEAT):
            with self._lock:
                if self._process is not process:
                    return
                try:
                    process.send(b"h\n")
                except SessionLost:
                    return  # its reader finds the channel gone

    def _kill(self, ident: int) -> None:
        with self._lock:
            process = self._process
            if process is None or ident not in self._served:
                return
            try:
                process.send(b"k %d\n" % ident)
            except SessionLost:
                self._lost(process, "it takes no more requests")

    def _lost(self, process: Process, why: str, corrupt: bool = False) -> None:
        """Every cell it served is told, once the runner, its children and their
        cells' processes are killed (where the node answers: a retry must not run
        beside what is left of its cell); the next cell starts another runner.
        Called under the lock."""
        group = self._group.pop(process, None)
        self._began.pop(process, None)
        quiet = self._quiet.pop(process, None)
        if quiet is not None:
            quiet.set()
        if self._process is process:
            self._process = None
        cells = [served.cell for served in self._served.values() if served.cell]
        # else it ended with nothing in flight (closed), or before it said its group with no cell
        # of its own in flight (its python3 could not start): nothing to kill
        if (self._served or corrupt) and (group or cells):
            kill = [f"kill -s KILL -- -{group} 2>/dev/null" if group else "true"]
            kill += [reap("FARM_CELL", cell, "reaped") for cell in cells]
            # over the runner's own connection, else a fresh one: where the session was cut (its
            # sshd killed, the listener up) the first failed, and the cell's processes ran on beside
            # its retry (a red-team finding)
            for _ in range(2):
                try:
                    self._open_transport(self._transport)
                    self._transport.run("; ".join(kill), timeout=LOST_KILL_TIMEOUT)
                    break
                except InfraError:
                    self._transport.close()
        self._transport.close()  # a broken connection is made again on next use
        said = process.stderr().strip()
        reason = f"its resident runner ended ({why}{': ' + said[-300:] if said else ''})"
        for served in self._served.values():
            _put(served, ("lost", reason))
        self._served.clear()

    def _read(self, process: Process, mark: bytes) -> None:
        """Hands each message's bytes to its cell's thread, in order, until the runner
        ends. Only messages that start with the runner's mark are its: whatever a
        process of the same user wrote into the stream lies between them (each is
        one write within PIPE_BUF) and is skipped, reaching no cell."""
        buffer = bytearray()
        why, corrupt = "its channel closed", False
        try:
            while True:
                # the node's silence, not the farm's: a reader busy handing on what came is not waiting
                self._listening[process] = time.monotonic()
                block = process.recv()
                self._listening.pop(process, None)
                if not block:
                    break
                buffer += block
                while True:
                    at = buffer.find(mark)
                    if at < 0:  # nothing of the runner's yet: keep what may be the start of a mark
                        del buffer[: max(len(buffer) - len(mark) + 1, 0)]
                        break
                    del buffer[:at]  # not the runner's
                    line_end = buffer.find(b"\n", len(mark), len(mark) + HEADER_LIMIT)
                    if line_end < 0:
                        if len(buffer) >= len(mark) + HEADER_LIMIT:
                            raise ValueError(f"a header past {HEADER_LIMIT} bytes: {bytes(buffer[:80])!r}")
                        break
                    words = bytes(buffer[len(mark) : line_end]).split()
                    kind = words[0].decode("ascii", "replace") if words else ""
                    value: bytes | int
                    if kind == "p" and len(words) == 2:
                        with self._lock:
                            self._group[process] = int(words[1])
                        del buffer[: line_end + 1]
                        continue
                    if kind == "b" and len(words) == 1:
                        del buffer[: line_end + 1]
                        continue
                    if kind in ("o", "e") and len(words) == 3:
                        size = int(words[2])
                        if not 0 <= size <= HEADER_LIMIT * 1024:  # the runner sends at most PIPE_BUF
                            raise ValueError(f"a length it cannot hold: {size}")
                        if len(buffer) < line_end + 1 + size:
                            break
                        value = bytes(buffer[line_end + 1 : line_end + 1 + size])
                        del buffer[: line_end + 1 + size]
                    elif kind == "x" and len(words) == 3:
                        value = int(words[2])
                        del buffer[: line_end + 1]
                    else:
                        raise ValueError(f"a header it cannot read: {bytes(buffer[:80])!r}")
                    ident = int(words[1])
                    with self._lock:
                        served = self._served.pop(ident, None) if kind == "x" else self._served.get(ident)
                    if served is not None:
                        _put(served, (kind, value))
        except ValueError as err:  # the mark was the runner's: its own stream is broken
            why, corrupt = f"it sent what the farm cannot read: {err}", True
        self._listening.pop(process, None)
        with self._lock:
            self._lost(process, why, corrupt)
        process.close()


def _put(served: _Served, item: tuple[str, bytes | int | str]) -> None:
    """Into the cell's queue; a cell whose thread has gone (its deadline) is not waited for."""
    while not served.gone:
        try:
            served.chunks.put(item, timeout=1.0)
            return
        except queue.Full:
            continue
