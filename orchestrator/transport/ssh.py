"""A node over OpenSSH, through Fabric, with the pitfalls of
../shared/research/fabric-ssh-pitfalls.md designed out:

- Strict host keys. Fabric always installs AutoAddPolicy; we replace it with a
  policy that checks every host key against the node's known_hosts, read as
  OpenSSH reads it (known_hosts.py), and refuses an unknown host saying its
  fingerprint and the exact line to add, a changed key, and a revoked one.
- No ~/.ssh/config surprises: SSH config files are not loaded; farm.yaml alone
  says how to reach a node (Fabric would silently ignore StrictHostKeyChecking
  from it anyway).
- Timeouts everywhere: connect, banner and auth timeouts on the handshake;
  each command's own deadline; and a watchdog (ssh_watchdog.py) that closes the
  connection of a command's channel when even that does not return (paramiko waits
  for a channel request's reply without a timeout, and a SIGSTOPped sshd blocks it
  forever).
- Commands run on raw paramiko channels, read as they arrive: Fabric's runner
  starts three threads per command, which at fleet scale is the farm's main
  CPU cost; the connection is tuned for a command's latency (ssh_tuning.py).
- One connection per node: a transport per worker thread, the workers' transports
  sharing one SSH connection (sibling()), each with its own channels and SFTP.
- No pty (it merges stderr into stdout), no stdin; large output is written to
  files on the node and comes back framed in a command's stdout (frames.py) or
  through read().
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import paramiko
from fabric import Config, Connection

from orchestrator.errors import (
    CommandTimeout,
    ConnectError,
    HostKeyError,
    KnownHostsUnreadable,
    SessionLost,
    SshdDropped,
)
from orchestrator.transport import known_hosts
from orchestrator.transport.base import CommandResult, Deadline, Process, Transport
from orchestrator.transport.home_paths import expanded
from orchestrator.transport.login_shell import portable
from orchestrator.transport.ssh_dial import DialCut, DialedConnection, answers
from orchestrator.transport.ssh_files import SftpFiles
from orchestrator.transport.ssh_handshake import dropped, refused_keys
from orchestrator.transport.ssh_liveness import Hearing, silent
from orchestrator.transport.ssh_process import (
    PROCESS_IO_TIMEOUT,
    STDERR_KEEP,
    ChannelProcess,
    close_connection,
)
from orchestrator.transport.ssh_tuning import TunedTransport, exec_nowait
from orchestrator.transport.ssh_watchdog import WATCHDOG
from orchestrator.transport.stdin_gate import await_ready, gated

# paramiko logs handshake failures with tracebacks to an unconfigured logger, which
# Python prints on stderr: noise in a cron mail for what is already an infra-error.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

OVERFLOW_WAIT = 5.0  # seconds a thread's own connection is asked again for a session (_session)


def _parse_jump(jump: str, default_user: str | None) -> tuple[str | None, str, int]:
    user = default_user
    hostport = jump
    if "@" in jump:
        user, hostport = jump.split("@", 1)
    host, _, port = hostport.partition(":")
    return user, host, int(port or 22)


class _Shared:
    """One SSH connection used by several transports, one per thread (paramiko
    opens channels from any thread); the last transport to close it closes it."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.users = 1
        self.lock = threading.Lock()


class SSHTransport(SftpFiles, Transport):
    streams_output = True
    keeps_processes = True
    _overflow: Connection | None = None  # a connection of this thread's own (_session), once sshd refused one

    def sibling(self) -> Transport:
        """Shares this transport's open connection: a node's worker threads need one
        handshake, not one each. A sibling that is closed (after a broken session)
        and opened again connects on its own."""
        if not self._open:
            return super().sibling()
        twin = SSHTransport(self.name, self.node, self.run_token)
        twin._conn, twin._sftp, twin._share, twin._overflow = self._conn, None, self._share, None
        with self._share.lock:
            self._share.users += 1
        twin._open = True
        return twin

    def _connection(self, host: str, port: int, user: str | None, gateway=None) -> Connection:
        node = self.node
        key_file = expanded(node.key_file, self.name, "key_file") if node.key_file else None
        config = Config(overrides={"load_ssh_configs": False, "run": {"hide": True}})
        connect_kwargs = {
            "banner_timeout": node.connect_timeout,
            "auth_timeout": node.connect_timeout,
            "channel_timeout": node.connect_timeout,
            "look_for_keys": False,
            "allow_agent": key_file is None,
            "transport_factory": TunedTransport,
        }
        if key_file:
            connect_kwargs["key_filename"] = key_file
        path = expanded(node.known_hosts, self.name, "known_hosts")
        try:
            known = known_hosts.load(path)  # without the file every host is unknown, and refused with the line to add
        except (OSError, UnicodeDecodeError) as err:
            raise KnownHostsUnreadable(
                f"node {self.name!r}: cannot read its known_hosts {path} ({type(err).__name__}: {err}); "
                "it must be an OpenSSH known_hosts file"
            ) from err
        # paramiko knows no key, so each comes to CheckHostKey; it is asked only for the
        # algorithms of the keys listed for the host (as paramiko did given them, and OpenSSH does)
        name = host if port == 22 else f"[{host}]:{port}"
        allowed = known.algorithms(name)
        preferred = TunedTransport._preferred_keys
        if allowed & set(preferred):
            connect_kwargs["disabled_algorithms"] = {"keys": [alg for alg in preferred if alg not in allowed]}
        conn = DialedConnection(
            host,
            user=user,
            port=port,
            config=config,
            gateway=gateway,
            connect_timeout=node.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        conn.client.get_host_keys().clear()
        conn.client.set_missing_host_key_policy(known_hosts.CheckHostKey(self.name, f"{host}:{port}", known))
        return conn

    def _connect(self) -> None:
        self._conn = self._dial()
        self._sftp = None
        self._share = _Shared(self._conn)
        self._overflow: Connection | None = None  # this thread's own, where sshd refused a session

    def _dial(self) -> Connection:
        node = self.node
        gateway = None
        if node.jump:
            juser, jhost, jport = _parse_jump(node.jump, node.user)
            gateway = self._connection(jhost, jport, juser)
        conn = self._connection(node.host or "", node.port, node.user, gateway)
        try:
            conn.open()
            conn.transport.set_keepalive(30)
            for link in (conn.transport, gateway.transport if gateway is not None else None):
                if isinstance(link, TunedTransport):
                    link.settle()
            return conn
        except HostKeyError:
            close_connection(conn)
            raise
        except DialCut as err:  # a stop's cut: not the node's fault, whatever paramiko said of the cut socket
            close_connection(conn)
            raise ConnectError(f"node {self.name!r}: {node.host}:{node.port}: {err.strerror}") from err
        except paramiko.AuthenticationException as err:
            said = refused_keys(conn.client.get_transport(), err)
            close_connection(conn)
            raise ConnectError(f"node {self.name!r}: authentication failed ({err}){said}") from err
        except paramiko.ssh_exception.NoValidConnectionsError as err:
            close_connection(conn)
            causes = answers(err, node.connect_timeout)
            raise ConnectError(f"node {self.name!r}: cannot connect to {node.host}:{node.port} ({causes})") from err
        except (TimeoutError, paramiko.SSHException, OSError, EOFError) as err:
            link = conn.client.get_transport()
            # its host key checked, not yet authenticated: sshd dropped the farm while it offered keys
            in_auth = link is not None and link.host_key is not None and not link.is_authenticated()
            close_connection(conn)
            if in_auth:
                raise ConnectError(
                    f"node {self.name!r}: authentication failed: {node.host}:{node.port} closed the connection "
                    f"while the farm offered its keys ({type(err).__name__}: {err}); an sshd whose "
                    "MaxAuthTries is below the keys an agent holds does this: give the node's own key in key_file"
                ) from err
            if link is not None and link.host_key is None and dropped(err):
                raise SshdDropped(
                    f"node {self.name!r}: {node.host}:{node.port} took the connection and dropped it before the "
                    f"login ({type(err).__name__}: {err}): its sshd is up but started no session for the farm: the "
                    "node may be out of processes (its `ulimit -u`, a cgroup's pids.max, the kernel's pid_max), past "
                    "sshd's MaxStartups, or refusing the farm's address (hosts.deny, a firewall that resets)"
                ) from err
            raise ConnectError(
                f"node {self.name!r}: cannot connect to {node.host}:{node.port} ({type(err).__name__}: {err})"
            ) from err

    def _session(self) -> paramiko.Channel:
        """A channel for one command. sshd's MaxSessions bounds the channels of one connection
        (sites set 1 or 2), and the node's threads and its resident runner share one: where
        sshd refuses one more, the command goes on a connection of this thread's own, opened
        once (the look at a node after a failed run had been refused, a lost card judged the
        kernel's fail: a red-team finding)."""
        timeout = self.node.connect_timeout
        try:
            return self._conn.client.get_transport().open_session(timeout=timeout)
        except paramiko.ChannelException:
            pass
        # the thread's own, kept for its later commands (each refused on the shared one again)
        self._overflow = self._overflow or self._dial()
        # sshd frees a closed session's place a moment after the close: the thread's next command,
        # sent at once, was refused on a busy node (MaxSessions 1), so it is asked again for a while
        until = time.monotonic() + OVERFLOW_WAIT
        while True:
            try:
                return self._overflow.client.get_transport().open_session(timeout=timeout)
            except paramiko.ChannelException as err:
                if time.monotonic() >= until:
                    raise SessionLost(
                        f"node {self.name!r}: sshd refused a session on the farm's shared connection and on "
                        f"this thread's own ({err}): raise the node's MaxSessions (sshd_config) to 2 or more"
                    ) from err
            time.sleep(0.05)

    @staticmethod
    def _drop(on: list[paramiko.Channel]) -> None:
        """The watchdog's: the connection of a command's channel froze (the shared one or this
        thread's own), and only that one is closed. While the command still waits for a channel
        (each step bounded by its own timeout: the open, the thread's own connection), the node's
        shared connection had been closed, healthy, under its resident runner and every sibling."""
        for channel in on:
            channel.get_transport().close()

    def _disconnect(self) -> None:
        try:
            if self._sftp is not None:
                self._sftp.close()
        except Exception:
            pass
        with self._share.lock:
            self._share.users -= 1
            last = self._share.users <= 0
        if last:
            close_connection(self._conn)
        if self._overflow is not None:
            close_connection(self._overflow)
            self._overflow = None

    def _run_streamed(
        self, command: str, deadline: Deadline, sink: Callable[[bytes], None], stdin: bytes = b""
    ) -> CommandResult:
        # A channel of its own, read as it arrives: SSH's window is the flow
        # control, so a command printing 100 MB streams with one chunk in memory.
        start = time.monotonic()
        stderr = bytearray()
        # paramiko waits for a channel request's reply without a timeout: a frozen peer
        # would hold exec_command forever, so the watchdog closes the connection
        on: list[paramiko.Channel] = []  # the command's channel, once it has one
        watchdog = WATCHDOG.watch(deadline, lambda: self._drop(on))
        try:
            channel = self._session()
            on.append(channel)
            try:
                if watchdog.fired:  # (set before its action reads `on`) the wait for a channel outlasted it
                    raise CommandTimeout(f"node {self.name!r}: no channel within {deadline.budget:.0f} s")
                exec_nowait(channel, portable(gated(command) if stdin else command))
                # sent whole before any output is read: beyond the channel's window (2 MiB) the
                # command must read its stdin first (the farm's commands do: `cat >`, the runner)
                try:
                    # after the login's start-up files, which may read stdin (stdin_gate.py)
                    if stdin and await_ready(channel, deadline, stderr, STDERR_KEEP):
                        channel.sendall(stdin)
                    channel.shutdown_write()
                except OSError:
                    # the command ended before it read all of it (a full disk under `cat >`):
                    # its exit status and stderr, read below, say why; a connection that
                    # broke has no exit status, and is a lost session there
                    pass
                # a node cut off mid-command is asked after a silence, not waited for to its budget's end
                hearing = Hearing(channel, self.name)
                while True:
                    left = deadline.left()
                    if left <= 0:
                        raise CommandTimeout(
                            f"node {self.name!r}: command still running after {deadline.budget:.0f} s{silent(channel)}"
                        )
                    channel.settimeout(min(left, 1.0))
                    while channel.recv_stderr_ready():  # drained as it comes: it shares stdout's window
                        stderr += channel.recv_stderr(1 << 16)[: max(STDERR_KEEP - len(stderr), 0)]
                        hearing.heard()
                    try:
                        block = channel.recv(1 << 20)
                    except TimeoutError:
                        hearing.check()
                        continue
                    if not block:
                        break
                    hearing.heard()
                    sink(block)
                while not channel.status_event.wait(min(max(deadline.left(), 0.1), 1.0)):
                    if deadline.left() <= 0:
                        raise CommandTimeout(
                            f"node {self.name!r}: no exit status within {deadline.budget:.0f} s{silent(channel)}"
                        )
                    hearing.check()
                while channel.recv_stderr_ready():
                    stderr += channel.recv_stderr(1 << 16)[: max(STDERR_KEEP - len(stderr), 0)]
                status = channel.exit_status
            finally:
                channel.close()
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as err:
            if watchdog.fired:
                raise CommandTimeout(
                    f"node {self.name!r}: no answer within {deadline.budget:.0f} s; connection dropped"
                ) from err
            raise SessionLost(f"node {self.name!r}: session failed ({type(err).__name__}: {err})") from err
        finally:
            watchdog.cancel()
        if status < 0:
            raise SessionLost(f"node {self.name!r}: the session ended before the command's exit status came")
        return CommandResult(
            command=command,
            exit_code=status,
            stdout="",
            stderr=stderr.decode("utf-8", "replace"),
            seconds=time.monotonic() - start,
        )

    def _start(self, command: str) -> Process:
        try:
            channel = self._session()
            channel.settimeout(PROCESS_IO_TIMEOUT)
            exec_nowait(channel, portable(command))  # a refusal closes the channel: its first recv is b""
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as err:
            raise SessionLost(f"node {self.name!r}: session failed ({type(err).__name__}: {err})") from err
        return ChannelProcess(channel, self.name)
