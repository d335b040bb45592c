"""Streams for people's eyes (progress on stdout, `--log`, notes on stderr) that never cost the run.

A Guarded stream's first failed write stops it (a reader gone: EPIPE; a full disk); and where it
is a descriptor that can block (a pipe, a FIFO, a terminal held by Ctrl-S), its lines go out
through a writer thread of its own behind a bounded queue. A reader that stays open but stops
reading (cron's mail filter stuck) filled the pipe, and the thread printing a progress line
blocked in the write: a node's thread, or the run's own, so the run stayed `running` with its
lock held and SIGTERM only noted (red-team 171). Now what the queue cannot hold is dropped and
counted, and the stream says so where the gap is: "N progress lines were dropped here while the
output was not read", queued in the dropped lines' place once the queue has room (it had been said
before the backlog queued ahead of the gap, in a count raced by the writers: red-team 176), or at
the end. At the process's
exit each queue gets SETTLE seconds without progress to empty, then is given up: the process
returns its code whatever its readers do.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import io
import os
import queue
import sys
import threading
from typing import TextIO

QUEUED = 10_000  # lines a stalled reader may fall behind before they are dropped
SETTLE = 5.0  # seconds without a line written after which, at exit, a stalled reader is given up
_HURRY = threading.Event()  # a stop signal after the run's end: exit now, readers or not
_PUMPED: list[Guarded] = []
# the writer threads' name: safe to fork beside (run/workers.py FORK_SAFE_THREADS), as a forked child
# writes its Guarded streams itself (_forked): a worker forked beside one had been started from the
# fork server instead, 0.5-1.3 s later, wherever stdout was a pipe or a terminal
WRITER_THREAD = "farm-output"


def _descriptor(stream: object) -> int | None:
    """The descriptor under a plain file stream (sys.stdout as Python opened it), or under one that
    writes its descriptor itself with no lock of its own (cli/logfile.ReopenedLog, `lockless`): a
    write there may block. None for what cannot (StringIO, pytest's capture, a closed stdout)."""
    buffer = getattr(stream, "buffer", None)
    raw = getattr(buffer, "raw", buffer)  # under PYTHONUNBUFFERED (python -u) the buffer is the FileIO itself
    if not isinstance(raw, io.FileIO) and not getattr(stream, "lockless", False):
        return None
    try:
        return stream.fileno()  # type: ignore[attr-defined]
    except (OSError, ValueError, AttributeError):
        return None


class Guarded:
    """A text stream whose first failed write stops it: a reader that stopped reading
    (`farm verify | head -1`: EPIPE), a full disk (ENOSPC), any OSError. Progress is
    for people and the run's results go to the store: a BrokenPipeError raised in a
    node's thread made its cells internal errors and the run exit 70. Once stopped,
    the stream's descriptor points at /dev/null, so neither what is still buffered
    nor a later line (anyone's) fails again, nor the interpreter's flush at exit.
    Over a descriptor that can block, writes are queued (see the module)."""

    def __init__(self, stream: TextIO, name: str | None = None) -> None:
        self.stream = stream
        self.name = name or str(getattr(stream, "name", "output"))
        self.stopped: OSError | None = None
        self.dropped = 0  # lines a stalled reader missed, not yet said
        self._lock = threading.Lock()  # a line is queued whole
        self._stopping = threading.Lock()
        self._fd = _descriptor(stream)
        self._partial = ""
        self._queue: queue.Queue[str] = queue.Queue(QUEUED)
        self._written = threading.Condition()  # notified each time the writer thread finishes a line
        if self._fd is not None:
            # written by the descriptor, never through the stream's buffer: a writer blocked there would
            # hold the buffer's lock, and the interpreter's flush of sys.stdout at exit would wait on it
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
            threading.Thread(target=self._pump, name=WRITER_THREAD, daemon=True).start()
            _PUMPED.append(self)

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        if self.stopped is not None:
            return len(text)
        if self._fd is None:
            try:
                return self.stream.write(text)
            except OSError as err:
                self._stop(err)
            return len(text)
        with self._lock:  # whole lines are queued: a dropped one is a line missed, never half of one
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            for line in lines:
                self._put(line + "\n")
        return len(text)

    def _put(self, text: str) -> None:
        """Queue a line (under self._lock); the gap before it, if lines were dropped, said first."""
        try:
            self._say_dropped()
            self._queue.put_nowait(text)
        except queue.Full:
            self.dropped += 1

    def _say_dropped(self) -> None:
        """The note in the dropped lines' place (under self._lock); queue.Full while there is no room."""
        if self.dropped:
            note = f"farm: {self.dropped} progress lines were dropped here while the output was not read\n"
            self._queue.put_nowait(note)
            self.dropped = 0

    def flush(self) -> None:
        if self.stopped is not None:
            return
        if self._fd is None:
            try:
                self.stream.flush()
            except OSError as err:
                self._stop(err)
            return
        with self._lock:  # a live display's redraw ends with no newline: it goes out on flush
            if self._partial:
                self._put(self._partial)
                self._partial = ""

    def isatty(self) -> bool:
        try:
            return self.stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self.stream.fileno()

    def _pump(self) -> None:
        while True:
            text = self._queue.get()
            with self._lock, contextlib.suppress(queue.Full):  # the slot just freed: the gap said in its place
                self._say_dropped()
            try:
                if self.stopped is None:
                    self._send(text)
            except OSError as err:
                self._stop(err)
            finally:
                self._queue.task_done()
                with self._written:
                    self._written.notify_all()

    def _send(self, text: str) -> None:
        if getattr(self.stream, "lockless", False):
            self.stream.write(text)
            return
        data = text.encode(self.encoding, "backslashreplace")
        while data:
            data = data[os.write(self._fd, data) :]  # type: ignore[arg-type]

    def settle(self, seconds: float = SETTLE) -> None:
        """Wait for the queued lines while the reader takes one each `seconds`; then give it up:
        the stream stops, its descriptor on /dev/null, and stderr says what was lost (when it is
        not the same stalled file)."""
        if self._fd is None or self.stopped is not None:
            return
        self.flush()
        with self._written:
            while (self.dropped or self._queue.unfinished_tasks) and not _HURRY.is_set():
                with self._lock, contextlib.suppress(queue.Full):  # lines dropped after the last one queued
                    self._say_dropped()
                before = self._queue.unfinished_tasks
                self._written.wait(seconds)
                if self._queue.unfinished_tasks == before and self._queue.unfinished_tasks:
                    break  # no line written in `seconds`: the reader has stopped
        if self.dropped or self._queue.unfinished_tasks:
            missed = self.dropped + self._queue.unfinished_tasks
            said_aside = not _same_file(self._fd, 2)  # before its descriptor is /dev/null
            self._stop(OSError(errno.EAGAIN, "its reader stopped reading"), quiet=True)
            if said_aside:
                aside(f"farm: {missed} progress lines were dropped from {self.name} while the output was not read")

    def close(self) -> None:
        """The stream closed once its lines are out; one given up stays open on /dev/null, its
        number never another file's while its writer may still be in a write."""
        self.settle()
        if self.stopped is None or self._fd is None:
            with contextlib.suppress(OSError):
                self.stream.close()

    def _stop(self, err: OSError, quiet: bool = False) -> None:
        with self._stopping:
            if self.stopped is not None:
                return
            self.stopped = err
        with contextlib.suppress(OSError, ValueError):  # a stream without a descriptor just stays stopped
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.stream.fileno())
            finally:
                os.close(null)
        if err.errno != errno.EPIPE and not quiet:  # a reader that stopped reading is no news; a full disk is
            aside(f"farm: cannot write {self.name} ({err.strerror or err}): nothing more goes there; the run goes on")


def _same_file(fd: int, other: int) -> bool:
    try:
        mine, theirs = os.fstat(fd), os.fstat(other)
    except OSError:
        return True  # unknown: say nothing rather than wait on it
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


_ASIDE: dict[int, Guarded] = {}


def aside(line: str) -> None:
    """A note on stderr that never waits for its reader: a stalled stderr held the SIGTERM handler's
    "stopping run" in its write, on the main thread, before the stop began (red-team 171)."""
    stream = sys.stderr
    if stream is None or type(stream).__module__.startswith("rich"):  # never a live display's proxy over stdout
        stream = sys.__stderr__
    if stream is None:
        return
    if _descriptor(stream) is None:  # pytest's capture, a StringIO: nothing to wait on
        Guarded(stream).write(line + "\n")
        return
    guarded = _ASIDE.get(id(stream))
    if guarded is None:
        guarded = _ASIDE[id(stream)] = Guarded(stream, "stderr")
    guarded.write(line + "\n")


def hurry() -> None:
    """A stop signal once the run is stored: the exit waits no more on readers."""
    _HURRY.set()
    for guarded in list(_PUMPED):
        with guarded._written:
            guarded._written.notify_all()


@atexit.register
def _settle_all() -> None:
    done = 0
    while done < len(_PUMPED):  # a stalled stream's note on stderr may start stderr's writer meanwhile
        _PUMPED[done].settle()
        done += 1


def _forked() -> None:
    """In a forked child (a run's worker): no writer thread came with it, and a lock or the queue may
    have been held mid-line by one of the parent's threads: its streams are written directly, and its
    exit waits on no queue."""
    for guarded in _PUMPED:
        guarded._fd = None
        guarded._lock, guarded._written = threading.Lock(), threading.Condition()
        guarded._queue = queue.Queue(QUEUED)
        guarded._partial = ""
    _PUMPED.clear()


os.register_at_fork(after_in_child=_forked)
