"""The SSH transport's files: uploads and reads by SFTP (each watched: ssh_liveness.Transfer),
and a file streamed back on a channel of its own."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import paramiko
from fabric import Connection

from orchestrator.errors import InfraError, not_read_back
from orchestrator.transport.login_shell import portable
from orchestrator.transport.ssh_liveness import Transfer

# Seconds a streamed file may stall before the read is given up (infra-error).
STREAM_IDLE = 60.0
UNREAD = "@@farm-unread"  # on stderr, exit 3: the streamed file is there but could not be read


def _folders_above(path: str) -> list[str]:
    """The folders above PATH (as frames.emit looks at them): one without its search bit hides the file."""
    parts = path.split("/")[:-1]
    return [folder for i in range(len(parts)) if (folder := "/".join(parts[: i + 1]))]


class SftpFiles:
    """SSHTransport's file methods (a mixin: it has the connection, and the thread's own)."""

    name: str
    _conn: Connection
    _sftp: paramiko.SFTPClient | None
    _overflow: Connection | None

    def _dial(self) -> Connection:
        raise NotImplementedError

    def _session(self) -> paramiko.Channel:
        raise NotImplementedError

    def _link(self) -> paramiko.Transport | None:
        """The connection the SFTP goes (or will go) over."""
        if self._sftp is not None:
            return self._sftp.get_channel().get_transport()
        return self._conn.client.get_transport()

    def _sftp_client(self) -> paramiko.SFTPClient:
        # its own SFTP, not Fabric's Connection.sftp(): that one is the connection's, shared by the
        # siblings, and a sibling's close (after a broken session) closed it under the others
        if self._sftp is None:
            try:
                self._sftp = self._conn.client.open_sftp()
            except paramiko.ChannelException:  # sshd's MaxSessions: as _session()
                self._overflow = self._overflow or self._dial()
                self._sftp = self._overflow.client.open_sftp()
        return self._sftp

    def _put(self, local: Path, remote: str) -> None:
        with Transfer(self._link, self.name, f"the upload of {local.name}") as transfer:
            try:
                self._sftp_client().put(str(local), remote, callback=transfer.progressed)
            except (paramiko.SSHException, OSError, EOFError) as err:
                raise InfraError(f"node {self.name!r}: upload of {local.name} failed ({err})") from err

    def _read(self, remote: str, limit: int) -> bytes:
        with Transfer(self._link, self.name, f"the download of {remote}"):
            try:
                with self._sftp_client().open(remote, "rb") as handle:
                    size = handle.stat().st_size or 0
                    if size:
                        handle.prefetch(min(size, limit))
                    return handle.read(limit)
            except FileNotFoundError:
                raise
            except (paramiko.SSHException, OSError, EOFError) as err:
                raise InfraError(f"node {self.name!r}: download of {remote} failed ({err})") from err

    def _stream(self, remote: str, limit: int, chunk: int) -> Iterator[bytes]:
        # `head` on a channel of its own: SSH's window is the flow control, so a
        # 100 MB stdout streams at link speed with one chunk in memory
        # (paramiko's SFTP prefetch would buffer the whole file). A regular file only, not through
        # a link, as frames.emit reads: `cat` sent a link's target (a kernel's stdout made a link to
        # ~/.ssh/id_ed25519) and blocked on a FIFO put in a file's place
        q = shlex.quote(remote)
        # one that is there but cannot be read (its mode, a folder above it without its search bit:
        # `[ -f ]` fails as for a missing one) says so, as frames.emit does: read as empty, a kernel's
        # stdout was "no pass marker", the kernel blamed (red-team 268)
        above = " ".join(shlex.quote(a) for a in _folders_above(remote))
        read = (
            f"u=0; if [ -f {q} ] && [ ! -L {q} ]; then o=1; {{ o=0; head -c {int(limit)} <&4 || u=1; }} 4< {q} "
            f"2>/dev/null; [ $o -eq 0 ] || u=1; elif [ ! -e {q} ] && [ ! -L {q} ]; then for a in {above}; do "
            f'[ -d "$a" ] && [ ! -x "$a" ] && u=1; done; fi; [ $u -eq 0 ] || {{ echo {UNREAD} >&2; exit 3; }}'
        )
        try:
            channel = self._session()
            channel.settimeout(STREAM_IDLE)
            channel.exec_command(portable(read))
            while block := channel.recv(chunk):
                yield block
            status = channel.recv_exit_status()
            error = channel.recv_stderr(4096).decode("utf-8", "replace").strip()
            channel.close()
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as err:
            raise InfraError(f"node {self.name!r}: reading {remote} failed ({type(err).__name__}: {err})") from err
        if status == 3 and error.splitlines()[-1:] == [UNREAD]:
            raise not_read_back(self.name, [remote])
        if status != 0 and "No such file" not in error:
            raise InfraError(f"node {self.name!r}: reading {remote} failed (cat exited {status}: {error[-200:]})")
