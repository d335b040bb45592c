"""The transport interface every stage uses, and its lifecycle.

A transport is created closed; open() connects (a local one has nothing to
connect); run/put/read act; close() releases. It is a context manager, and a
closed transport refuses use with an error naming the method, so a stage can
never silently run a command on a connection another thread closed.

Every command is a POSIX shell string built by the farm, with every value from
configuration quoted by shlex.quote. The node's declared `env` is exported by
each command's shell from the first line of its stdin (env_input.py: a command's
words are on view to every user of the node), never passed through sshd's
AcceptEnv (which silently drops names it does not list).
"""

from __future__ import annotations

import re
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import TransportClosed
from orchestrator.transport.env_input import READ_ENV, env_line


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


ANSWER_WAIT = 5.0  # seconds a node's connection may take to answer a keepalive before it is taken as gone


class Deadline:
    """When a streamed command must have ended (monotonic seconds). A command that
    carries several stages (a cell's one round trip) gets each stage's budget as
    the node starts it: a frozen node is given up on after the budget of the stage
    it froze in, not the sum of all of them."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.budget = seconds

    def extend(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.budget = seconds

    def left(self) -> float:
        return self.at - time.monotonic()


def reap(variable: str, value: str, tag: str = "leftover", start: str = "0") -> str:
    """Shell that SIGKILLs every process of this login whose environment holds
    VARIABLE=VALUE, waits until they ended (ended_sh), and prints `@@farm TAG N`, N counted from
    START (a shell word: the run's group kill's count, commands.guarded's farm_gn). One grep reads every
    /proc/PID/environ it may; the scanning shell itself carries no marker. The
    farm puts FARM_RUN=<run> FARM_CELL=<cell> into every kernel's environment,
    which a daemon's double fork and setsid keep."""
    pattern = shlex.quote(f"{variable}={value}")
    return (
        f"n={start}; farm_rk=; for p in $(grep -lxzF {pattern} /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do "
        f'[ "$p" = "$$" ] || {{ kill -s KILL "$p" 2>/dev/null && n=$((n+1)) && farm_rk="$farm_rk $p"; }}; done; '
        f'{ended_sh("$farm_rk")}echo "@@farm {tag} $n"'
    )


KILL_GRACE = 5  # seconds a killed process is given to end (node/files.py's, run/commands.py's)


def ended_sh(pids: str, seconds: float = KILL_GRACE) -> str:
    """Shell waiting until each of PIDS (a word list, SIGKILLed just before) has ended, gone or a
    zombie: at once, then every 50 ms for SECONDS; each still there after it is said as
    `@@farm undying PID CMD` (node/ended.py): the cell is infra-error, and the next cell on its GPU
    never meets it. Nothing is waited for where nothing was killed. Each `2>/dev/null` comes before
    its `< /proc/...`: the other order printed the shell's "cannot open" for every pid that had
    ended before its read, into the stage's stderr (review 165)."""
    polls = int(seconds * 20)
    return (
        f'farm_rl={pids}; farm_ri=0; while [ -n "$farm_rl" ]; do farm_rs=; for p in $farm_rl; do '
        "read -r farm_rx 2>/dev/null < /proc/$p/stat || continue; farm_rx=${farm_rx##*) }; "
        '[ "${farm_rx%% *}" = Z ] || farm_rs="$farm_rs $p"; done; farm_rl=$farm_rs; '
        f'[ -n "$farm_rl" ] && [ "$farm_ri" -lt {polls} ] || break; '
        "sleep 0.05 2>/dev/null || { sleep 1; farm_ri=$((farm_ri+19)); }; farm_ri=$((farm_ri+1)); done; "
        # its command line on one printable line (a kernel chose it: no line of the farm's in it)
        "for p in $farm_rl; do farm_rx=$(tr -c ' -~' ' ' 2>/dev/null < /proc/$p/cmdline | cut -c1-200); "
        'echo "@@farm undying $p ${farm_rx% }"; done; '
    )


class Process(ABC):
    """A command left running on the node, spoken to through its stdin and stdout
    (the resident runner). One thread sends, one receives."""

    @abstractmethod
    def send(self, data: bytes) -> None:
        """All of `data` to its stdin; SessionLost where it cannot take it."""

    @abstractmethod
    def recv(self) -> bytes:
        """Its next stdout bytes, as they come; b"" once it ended (or the session broke)."""

    @abstractmethod
    def stderr(self) -> str:
        """What it said on stderr (its last bytes), once it ended."""

    @abstractmethod
    def close(self) -> None:
        """Its stdin closed and the session let go; it ends once its work is done."""

    def answers(self, timeout: float) -> bool:
        """Whether the node still answers on the connection the process runs over (within
        `timeout` s); one that does not is closed. Where nothing lies between them: yes."""
        return True

    def drop(self) -> None:
        """Close the connection the process runs over (a stop's cut: the node gave no end in time)."""
        self.close()


class Transport(ABC):
    """Acts on one node. Not thread-safe: each worker thread has its own (sibling()
    shares the connection where the transport can).

    What a transport can do is stated here, not probed by its users:
    `streams_output` (a command's stdout arrives as it is printed, so files can
    come back inside it: frames.py), `pins_gpus` (the farm chooses the GPU a
    command runs on, by CUDA_VISIBLE_DEVICES; not where a scheduler places the
    command), `last_job_id` / `last_compute_node` (the batch job that ran
    the last command, where there is one), and `keeps_processes` (start(): a
    command left running, spoken to over its stdin and stdout)."""

    streams_output = False
    keeps_processes = False

    def __init__(self, name: str, node: NodeSpec, run_token: str | None = None) -> None:
        self.name = name
        self.node = node
        self.run_token = run_token  # the farm run this transport acts for (stop_run finds its work by it)
        self._open = False

    # lifecycle --------------------------------------------------------
    def open(self) -> None:
        if not self._open:
            self._connect()
            self._open = True

    def close(self) -> None:
        if self._open:
            self._open = False
            self._disconnect()

    def __enter__(self) -> Transport:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_open(self, method: str) -> None:
        if not self._open:
            raise TransportClosed(f"{type(self).__name__}.{method}() on node {self.name!r}: the transport is closed")

    def sibling(self) -> Transport:
        """A transport of its own for another thread, on the same node. Where the
        transport can, it shares this one's connection (one handshake per node,
        not per thread); by default it is a fresh one, opened on first use."""
        return type(self)(self.name, self.node, self.run_token)

    # capabilities -----------------------------------------------------
    pins_gpus = True

    @property
    def last_job_id(self) -> str | None:
        return None

    @property
    def last_compute_node(self) -> str | None:
        return None

    # actions ----------------------------------------------------------
    def run(self, command: str, *, timeout: float) -> CommandResult:
        """Run a shell command; a non-zero exit is a result, not an error.

        Raises CommandTimeout if the command (or its channel) outlives
        `timeout`, InfraError if the node cannot be reached.
        """
        self._require_open("run")
        if not (given := self._env_input()):
            return self._run(self._with_env(command), timeout)
        # the env goes on stdin (env_input.py), which only the streamed path carries (ssh, local)
        out = bytearray()
        done = self._run_streamed(self._with_env(command), Deadline(timeout), out.extend, given)
        return CommandResult(command, done.exit_code, out.decode("utf-8", "replace"), done.stderr, done.seconds)

    def run_streamed(
        self, command: str, *, timeout: float | Deadline, sink: Callable[[bytes], None], stdin: bytes = b""
    ) -> CommandResult:
        """Like run(), but stdout goes to `sink` in chunks as it arrives (the
        result's stdout is empty), and `stdin` is the command's whole standard
        input. Only where `streams_output`. A Deadline may be moved on by the
        caller while the command runs."""
        self._require_open("run_streamed")
        if not self.streams_output:
            raise TypeError(f"{type(self).__name__} cannot stream a command's output")
        deadline = timeout if isinstance(timeout, Deadline) else Deadline(timeout)
        return self._run_streamed(self._with_env(command), deadline, sink, self._env_input() + stdin)

    def start(self, command: str) -> Process:
        """A command left running (only where `keeps_processes`)."""
        self._require_open("start")
        if not self.keeps_processes:
            raise TypeError(f"{type(self).__name__} keeps no process running")
        process = self._start(self._with_env(command))
        if self._env_input():
            process.send(self._env_input())  # before anything its user sends: the line its shell reads first
        return process

    def stop_run(self, token: str, timeout: float) -> int:
        """Kill everything the farm run `token` started on this node, whatever
        process group or session it moved to; returns how many processes."""
        self._require_open("stop_run")
        out = self.run(reap("FARM_RUN", token), timeout=timeout).stdout
        match = re.search(r"@@farm leftover (\d+)", out)
        return int(match.group(1)) if match else 0

    def put(self, local: Path, remote: str) -> None:
        self._require_open("put")
        self._put(local, remote)

    def read(self, remote: str, limit: int) -> bytes:
        """The first `limit` bytes of a file on the node, unchanged."""
        self._require_open("read")
        return self._read(remote, limit)

    def stream(self, remote: str, limit: int, chunk: int = 1 << 20) -> Iterator[bytes]:
        """A file on the node, its first `limit` bytes, in chunks as they arrive (memory stays
        bounded whatever its size). A missing file is an empty stream, and so is a link, a FIFO
        or anything but a regular file: the files a stage sends back are read as frames.emit
        reads them on the node (Slurm's read-back once followed a kernel's link to the user's key,
        and blocked on a FIFO)."""
        self._require_open("stream")
        return self._stream(remote, limit, chunk)

    def _with_env(self, command: str) -> str:
        # the node's env is read from the command's stdin, never written into its words, which
        # every user of the node reads (ps): env_input.py
        return f"{READ_ENV}{command}" if self.node.env else command

    def _env_input(self) -> bytes:
        """What goes first on each command's stdin: the node's env (a transport that hands it on
        otherwise sends none: Slurm's, whose login transport sends it to the shell that runs srun)."""
        return env_line(self.node.env) if type(self)._with_env is Transport._with_env else b""

    # primitives each transport provides --------------------------------
    @abstractmethod
    def _connect(self) -> None: ...

    @abstractmethod
    def _disconnect(self) -> None: ...

    def _run(self, command: str, timeout: float) -> CommandResult:
        """A command's output collected from _run_streamed (the local and SSH transports: on a raw
        SSH channel, as Fabric's runner would start three threads per command, stdout, stderr and
        stdin, the farm's main CPU cost per cell); Slurm's submits a job instead."""
        stdout = bytearray()
        result = self._run_streamed(command, Deadline(timeout), stdout.extend)
        return CommandResult(
            command=command,
            exit_code=result.exit_code,
            stdout=stdout.decode("utf-8", "replace"),
            stderr=result.stderr,
            seconds=result.seconds,
        )

    def _run_streamed(
        self, command: str, deadline: Deadline, sink: Callable[[bytes], None], stdin: bytes = b""
    ) -> CommandResult:
        raise TypeError(f"{type(self).__name__} cannot stream a command's output")

    def _start(self, command: str) -> Process:
        raise TypeError(f"{type(self).__name__} keeps no process running")

    @abstractmethod
    def _put(self, local: Path, remote: str) -> None: ...

    @abstractmethod
    def _read(self, remote: str, limit: int) -> bytes: ...

    @abstractmethod
    def _stream(self, remote: str, limit: int, chunk: int) -> Iterator[bytes]: ...
