"""Every error the farm raises on purpose, and the exit code each one maps to.

    FarmError                      base; carries the CLI exit code
    ├── ConfigError                farm.yaml or a job file is wrong (exit 3)
    │   ├── ConfigErrors           several at once, from one load
    │   └── FarmChanged            farm.yaml or a job no longer loads at a run's end (cli/farm_now.py)
    ├── StoreError                 the results database cannot be used (exit 5)
    │   └── StoreUnreachable       its server could not be reached again (store/outage.py)
    ├── LockError                  another run holds the farm's lock (exit 6)
    ├── StoppedBeforeRun           a stop signal before the run was stored: nothing of it is (exit 4)
    ├── CommandStopped             a stop signal ended `farm report` (exit 128+N, as a shell says it)
    ├── TransportClosed            a closed transport was used: a bug in the farm (exit 70; never retried)
    ├── PageWriteError             a report page could not be written (report/site.py; exit 3)
    └── InfraError                 a node could not be used; never a kernel verdict (exit 4)
        ├── ConnectError           refused, unreachable, banner/auth failure
        │   ├── HostKeyError       unknown or changed host key (strict checking; never retried)
        │   │   └── KnownHostsUnreadable  the node's known_hosts could not be read (no key refused)
        │   ├── SessionLost        a session that worked broke (the node rebooted, the network went)
        │   └── SshdDropped        sshd closed the connection before the login (the machine is up)
        ├── NodeUnusable           reachable, but no nvcc, no work folder or a broken GPU (never retried)
        │   └── RunnerMute         the resident runner never said its group (run/resident.py)
        ├── ToolchainUnavailable   a toolchain's wheels could not be had (run/toolchain.py; never retried)
        ├── StagingFailed          the node could not take a bundle (run/staging.py: disk full, permissions)
        ├── InputsChanged          a file saved on the farm's machine since the load (run/bundle.py; never retried)
        ├── CommandTimeout         a command outlived its channel timeout
        ├── NotReadBack            a file of the cell's the node has but could not read back (not_read_back)
        └── SlurmJobError          Slurm ended the job or never started it (transport/slurm_jobs.py)
            ├── SlurmRejected      refused at submission (never retried)
            ├── SlurmPendingLimit  waited past the node's pending_limit (never retried)
            ├── SlurmStuck         pended for a reason Slurm never resolves; cancelled (never retried)
            ├── SlurmCancelled     scancel by a person or a policy (never retried)
            ├── SlurmOutOfMemory   killed over the job's memory limit (never retried)
            └── SlurmTimeLimit     Slurm's time limit (also a CommandTimeout)

Any other exception inside a node's thread is a bug in the farm: it stays with
that node (its cells are infra-error, "internal error"), the other nodes go on,
and the run exits 70.

The branches follow who must act: a ConfigError is the user's to fix, an
InfraError is the node admin's, and a kernel failure is not an error at all but
an outcome (see outcomes.py). Library exceptions (paramiko, invoke, SQLAlchemy)
are translated into these once, at the boundary where they are raised, with
``raise ... from`` so the cause stays visible in tracebacks.
"""

from __future__ import annotations

# Exit codes of `farm`; README.md documents them and tests assert them.
EXIT_OK = 0
EXIT_UNEXPECTED = 1  # at least one cell is not as expected (a kernel verdict)
EXIT_USAGE = 2  # click's own code for a malformed command line
EXIT_CONFIG = 3
EXIT_INFRA = 4  # every kernel verdict as expected, but some cells could not run
EXIT_STORE = 5
EXIT_LOCKED = 6
EXIT_INTERNAL = 70  # a bug in the farm itself (sysexits' EX_SOFTWARE): never a verdict
EXIT_SIGPIPE = 141  # the reader of stdout stopped reading (`farm show 1 | head`), as a shell says of SIGPIPE
# (never verify: its progress stops, its run goes on and returns the run's own code; guarded.Guarded)


class FarmError(Exception):
    exit_code = EXIT_UNEXPECTED


class ConfigError(FarmError):
    """A configuration problem, always naming the file, the key path, what was
    found and what was expected, so the message alone is enough to fix it."""

    exit_code = EXIT_CONFIG

    def __init__(
        self,
        file: str,
        key: str,
        found: str,
        expected: str,
        hint: str = "",
    ) -> None:
        self.file = file
        self.key = key
        self.found = found
        self.expected = expected
        self.hint = hint
        where = f"{file}: {key}" if key else file
        text = f"{where}: found {found}; expected {expected}."
        if hint:
            text += f" {hint}"
        super().__init__(text)


class ConfigErrors(ConfigError):
    """Several ConfigErrors from one load, reported together so a user fixes
    them in one pass rather than one run at a time."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.file, first.key, first.found, first.expected, first.hint)
        self.args = ("\n".join(str(e) for e in errors),)

    def __str__(self) -> str:
        return self.args[0]


class TransportClosed(FarmError):
    """A transport was used after it was closed: the farm's bug, not the node's,
    so it is never retried as an infra failure."""

    exit_code = EXIT_INTERNAL


class StoreError(FarmError):
    exit_code = EXIT_STORE


class LockError(FarmError):
    exit_code = EXIT_LOCKED


class StoppedBeforeRun(FarmError):
    """A stop signal came before the run was stored (waiting for the run lock, cli/prerun.py):
    nothing of it is, and nothing ran."""

    exit_code = EXIT_INFRA
    meaning = "the run was stopped before it started: no cell ran, no verdict"


class CommandStopped(FarmError):
    """SIGINT, SIGTERM or SIGHUP ended a command that has no run to stop (`farm report`,
    cli/run_signals.raising_on_signals): its exit is a shell's for that signal, 128+N; a Ctrl-C
    was click's "Aborted!" and exit 1, a kernel's failure (red-team 230)."""

    def __init__(self, text: str, signum: int) -> None:
        super().__init__(text)
        self.exit_code = 128 + signum


class InfraError(FarmError):
    """The node, not the kernel, is at fault. Cells that hit one are recorded
    as infra-error and never count as a kernel verdict."""

    exit_code = EXIT_INFRA
    retryable = True  # a passing fault may clear; health.py retries it a bounded number of times
    unreachable = False  # the node cannot be reached at all (see ConnectError)


class ConnectError(InfraError):
    unreachable = True  # the node itself is gone: worth waiting for (farm.yaml reconnect_window)


class SessionLost(ConnectError):
    pass


class SshdDropped(ConnectError):
    """The node took the TCP connection and its sshd closed it before the login: the machine is up
    (a reboot refuses or times out), its sshd unable to start a session (out of processes, past its
    MaxStartups). Waiting out the reconnect window for a reboot that is not coming had held a run
    300 s a try (fix 166): a retry, counted against the node, as any passing fault."""

    unreachable = False


class HostKeyError(ConnectError):
    retryable = False  # the same key is refused every time, and retrying a possible MITM helps no one


class KnownHostsUnreadable(HostKeyError):
    """The node's known_hosts could not be read: nothing is connected to a node its operator has not
    listed (never retried at the start), but no key was refused either, so a node awaited mid-run
    is awaited on (a read failed for a moment: EMFILE, an editor rewriting the file)."""


class NodeUnusable(InfraError):
    retryable = False  # a missing nvcc does not appear between two attempts


class CommandTimeout(InfraError):
    unreachable = True  # every command runs under a remote timeout: outliving it means the peer is gone


class NotReadBack(InfraError):
    """A file of the cell's that the node has but could not read back: its mode, a folder above it without
    its search bit (another cell's kernel's `chmod 000 cells`), a read that failed. Nothing read is no empty
    file: a disassembly of no instructions, a run that printed no marker (review 265, red-team 268)."""


def not_read_back(node: str, names: list[str]) -> NotReadBack:
    """The error, in one wording for the framed files (frames.FrameReader.finish) and the streamed ones
    (Transport.stream, Slurm's read-back: file_ends.read_back names the file's tag)."""
    return NotReadBack(
        f"node {node!r}: the node could not read back the cell's {', '.join(names)} (the file, "
        "or a folder of the farm's above it, unreadable there): no evidence from it"
    )
