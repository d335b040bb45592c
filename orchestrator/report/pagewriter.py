"""Report pages go to disk from a second process, in the order the render made them.

Creating a file is the kernel's work, and on a busy machine its slowest part:
3,400 new files took from 0.15 s to over 1 s of a cold render's system time,
all of it on the render's critical path. A writer process takes it off: the
render hands each page over a pipe and goes on making the next ones (writer
threads could not: each had to win the GIL back after every open, write and
close, so the writes waited for the render instead of overlapping it).

The writer keeps every guarantee of writing in the render's own process: it
writes the pages in the order they were handed over (a cell page is on disk
before the run or index page linking to it is handed over), each as
`write_fresh` or `write_page` would (only a new cell page is written in place;
any other page appears whole, by a rename), and it stops at its first error,
so nothing after the page that failed is written: `PageWriter.close` raises
that error (PageWriteError, naming the page) in the render.

This file is also the writer's program (`python -I -S pagewriter.py`): it
imports nothing but the standard library, so the process starts in
milliseconds, without the farm's packages.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from typing import IO, Any

FRESH, PAGE, CHANGED = 0, 1, 2  # write_fresh; write_page comparing with the page on disk; without comparing
_HEAD = struct.Struct("!BII")  # kind, path length, data length
# what the render may run ahead of the writer; past it, it waits (bounds the memory, not the time)
AHEAD = 64 << 20
_PIPE_SIZE = 1 << 20  # Linux's default maximum for an unprivileged pipe: fewer, larger hand-overs
# The report is published (README: reviewers read reports/, a web server serves it): its pages and
# the folders the farm makes for them are readable by all whatever the umask. Under cron's umask 077
# they were the farm user's alone and the web server answered 403 (a red-team finding). The
# database and the journal still follow the umask: the report is what the farm publishes.
PAGE_MODE = 0o644
FOLDER_MODE = 0o755


def make_folders(folder: str) -> None:
    """`folder` and its missing parents (os.makedirs' errors), those it made FOLDER_MODE."""
    missing = []
    while folder and not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    if missing:
        os.makedirs(missing[0], exist_ok=True)
    for made in missing:
        with contextlib.suppress(OSError):  # another render's, made meanwhile: its own to set
            os.chmod(made, FOLDER_MODE)


def _published(fd: int) -> None:
    with contextlib.suppress(PermissionError):  # a page another user wrote in place: its owner's to set
        os.fchmod(fd, PAGE_MODE)


def write_fresh(path: str, data: bytes) -> None:
    # A cell page not on disk yet: nothing links to it until the run's and the index
    # pages are written after it, so it is written in place, without a temporary file
    # and a rename (a run writes thousands). A render that dies halfway leaves a page
    # without its end, which stamps.stamped does not trust: it is written again next time.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(path, flags, PAGE_MODE)
    except FileNotFoundError:
        make_folders(os.path.dirname(path))
        fd = os.open(path, flags, PAGE_MODE)
    try:
        _published(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # a full disk: no page without its end left behind either (red-team 167's note)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        os.close(fd)


def write_page(path: str, data: bytes, compare: bool) -> None:
    # one renderer at a time (site_lock.py: the folder's render lock), so a fixed
    # temporary name per page is enough; the rename makes each page appear whole
    # (a page's stamp is trusted only because no page is ever seen half-written).
    # An unchanged page is not rewritten: re-rendering the same database touches
    # nothing. `compare=False`: the caller knows the page on disk, if any, differs.
    try:
        if compare and os.stat(path).st_size == len(data):
            with open(path, "rb") as page:
                if page.read() == data:
                    return
    except FileNotFoundError:
        pass
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        page = open(tmp, "wb")  # noqa: SIM115 (closed below; the folder is made on the first page only)
    except FileNotFoundError:
        make_folders(os.path.dirname(path))
        page = open(tmp, "wb")  # noqa: SIM115
    try:
        with page:
            _published(page.fileno())
            page.write(data)
        os.replace(tmp, path)
    except BaseException:  # a full disk, a folder where the page goes, a stop signal: no temporary left behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write(kind: int, path: str, data: bytes) -> None:
    if kind == FRESH:
        write_fresh(path, data)
    else:
        write_page(path, data, compare=kind == PAGE)


class WriteFailed(Exception):
    """A page the writer could not write: its path and the OSError."""

    def __init__(self, path: str, err: OSError) -> None:
        super().__init__(path, err)
        self.path = path
        self.oserror = err


class PageWriter:
    """The render's side: `put` hands a page over (written later, in order), `close`
    waits until every page is on disk and raises WriteFailed for the first that
    could not be. Where no writer process can be started, pages are written here,
    at once, as they are put."""

    def __init__(self) -> None:
        import subprocess  # the writer's own program needs none of this

        self._pending = bytearray()  # handed over, not yet in the pipe
        self._broken = False  # the writer stopped (at an error): nothing more is handed over
        self._failed: WriteFailed | None = None
        self._proc: Any = None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
        except OSError:  # no interpreter to start (an embedded one): write in this process
            return
        self._fd = self._proc.stdin.fileno()
        try:
            import fcntl

            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        except (ImportError, AttributeError, OSError):  # not Linux, or over the limit: the default size
            pass
        os.set_blocking(self._fd, False)

    def put(self, kind: int, path: str, data: bytes) -> None:
        if self._failed is not None:
            return  # the writer stopped: nothing after its error is written; close() raises it
        if self._proc is None:
            try:
                write(kind, path, data)
            except OSError as err:
                self._failed = WriteFailed(path, err)
            return
        if self._broken:
            return
        name = os.fsencode(path)
        self._pending += _HEAD.pack(kind, len(name), len(data))
        self._pending += name
        self._pending += data
        self._flush(wait=len(self._pending) > AHEAD)

    def _flush(self, wait: bool) -> None:
        """Moves what is pending into the pipe: as much as it takes now, or (`wait`) all."""
        if wait:
            os.set_blocking(self._fd, True)
        try:
            while self._pending:
                try:
                    sent = os.write(self._fd, self._pending)
                except BlockingIOError:
                    return  # the pipe is full: the writer is behind, the render goes on
                del self._pending[:sent]  # from the front of a bytearray: no copy of the rest
        except BrokenPipeError:  # the writer stopped at an error: close() reads it
            self._broken = True
            self._pending.clear()
        finally:
            if wait:
                os.set_blocking(self._fd, False)

    def close(self, check: bool = True) -> None:
        """Waits for every page handed over to be written; raises WriteFailed for the
        first that could not be (nothing after it was written), unless not `check`."""
        if self._proc is not None:
            proc, self._proc = self._proc, None
            try:
                self._flush(wait=True)
            finally:
                with contextlib.suppress(BrokenPipeError):  # the writer stopped: what was left is dropped
                    proc.stdin.close()
                said = proc.stdout.read()
                proc.stdout.close()
                code = proc.wait()
            if code != 0 and self._failed is None:
                self._failed = _failure(said, code)
        if check and self._failed is not None:
            raise self._failed


def _failure(said: bytes, code: int) -> WriteFailed:
    try:
        number, path, why = said.split(b"\0", 2)
        return WriteFailed(os.fsdecode(path), OSError(int(number), why.decode("utf-8", "replace")))
    except ValueError:  # it died without saying why (killed, out of memory)
        return WriteFailed("page writer", OSError(f"the page writer process exited with {code}"))


def main(source: IO[bytes], report: IO[bytes]) -> int:
    """The writer process: pages from `source` until it ends; at the first that
    cannot be written, says which on `report` and stops (exit 1)."""
    read = source.read
    while True:
        head = read(_HEAD.size)
        if len(head) < _HEAD.size:
            return 0
        kind, path_size, data_size = _HEAD.unpack(head)
        name, data = read(path_size), read(data_size)
        if len(name) < path_size or len(data) < data_size:
            return 1  # the render died handing this page over: never write part of one
        path = os.fsdecode(name)
        try:
            write(kind, path, data)
        except OSError as err:
            message = err.strerror or str(err)
            report.write(b"%d\0%s\0%s" % (err.errno or 0, os.fsencode(path), message.encode("utf-8", "replace")))
            report.flush()
            return 1


if __name__ == "__main__":
    sys.exit(main(sys.stdin.buffer, sys.stdout.buffer))
