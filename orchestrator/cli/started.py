"""The process as cron, systemd or a shell started it: its standard descriptors and its umask,
set right before any command opens a file (red-team 167)."""

from __future__ import annotations

import errno
import io
import os
import sys


class _ClosedStream(io.RawIOBase):
    """What a closed stdout is from here on: its first write fails as one to a closed descriptor
    does (EBADF), so what prints there says so once and stops (guarded.Guarded: the run goes
    on; base.echo: an export is exit 3); later writes, the interpreter's flush at exit among
    them, go nowhere."""

    name = "<stdout>"

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.failed = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data: object) -> int:
        size = memoryview(data).nbytes  # type: ignore[arg-type]
        if not self.failed:
            self.failed = True
            raise OSError(errno.EBADF, "closed by what started farm (`>&-`)")
        return size


def settle() -> None:
    """Descriptors 0-2 left closed (`farm verify --all >&-` in a crontab) become /dev/null: the
    next file opened took the number (the run lock, the journal), and sys.stdout was None, which
    `verify` died on (exit 70, "a bug in farm", no run). A closed stdout then reads as one that
    cannot be written; a closed stderr or stdin as /dev/null.

    A umask that masks the owner's own bits (0777) keeps them: the `local` node's build came out
    mode 000 and a passing kernel was judged `fail` ("the kernel's copy was gone or not
    executable"), and others never get write: under `umask 000` the `local` node's sources, cached
    binaries and cells were writable by every account on the machine (red-team 226), as SSH
    logins get `umask u+rwx,o-w` (transport/login_shell.py); the group's bits and others' read
    and execute stay as the umask says (a project's shared group, umask 002)."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: fd itself, as 0-2 go in order
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            closed.append(fd)
    if 1 in closed or sys.stdout is None:
        stream = io.BufferedWriter(_ClosedStream(1))  # type: ignore[arg-type]
        sys.stdout = io.TextIOWrapper(stream, encoding="utf-8", errors="backslashreplace", line_buffering=True)
    if 2 in closed or sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - the process's own, for its life
    os.umask(os.umask(0o077) & 0o077 | 0o002)
