"""Red-team round 171: output that stops being read, and the last moments of a run.

Broke (before/after):
- stdout (or a `--log` FIFO) a pipe whose reader stays open but stops reading (a stuck mail filter
  under cron): once the pipe filled, the thread printing a progress line blocked in its write, the
  run's own thread among them: the run stayed `running` for good, the run lock held, SIGTERM only
  noted. Progress lines now go through a writer thread with a bounded queue that drops (and counts)
  what a stalled reader cannot take: the run finishes, is stored and returns its code; a reader that
  resumes is told how many lines it missed.
- stderr a stalled pipe: the SIGTERM handler's "stopping run" note blocked the main thread before the
  stop began, so the run never stopped. The note goes through such a writer too.
- a SIGTERM or SIGHUP after the run was stored finished but before the process exited (after its
  `report:` line): the process returned 143/129 while the run said exit 0. The handlers stay until
  the process exits, which returns the stored code.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm_argv, farm_env
from nodes import query
from toyfarm import toy_on_t4

F_SETPIPE_SZ = 1031  # Linux fcntl: a pipe's buffer, here its smallest (one page)
SLEEPS = """\
#include <cstdio>
#include <unistd.h>
int main() { sleep(60); std::printf("toy: PASS\\n"); return 0; }
"""


def _toy(root: Path, source: str | None = None) -> dict[str, str]:
    """The toy farm on its local node, a T4 stand-in on PATH (`plain` passes)."""
    return farm_env(toy_on_t4(root, source)[1])


def _fill(fd: int) -> None:
    """`fd`'s pipe shrunk to a page and filled: its reader (the test) holds it open and reads nothing."""
    fcntl.fcntl(fd, F_SETPIPE_SZ, 4096)
    os.set_blocking(fd, False)
    try:
        while True:
            os.write(fd, b"x" * 512)
    except BlockingIOError:
        pass
    os.set_blocking(fd, True)


@pytest.fixture
def stalled() -> Iterator[tuple[int, int]]:
    """A pipe (read end, write end) that is full, its reader alive and not reading."""
    read, write = os.pipe()
    _fill(write)
    yield read, write
    for fd in (read, write):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


def _runs(root: Path) -> list[tuple[str, int | None]]:
    if not (root / "results.db").exists():
        return []
    try:
        return [(r["status"], r["exit_code"]) for r in query(root / "results.db", "SELECT status, exit_code FROM runs")]
    except Exception:  # the run's tables are being made
        return []


def _wait(what, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.1)
    return False


def _lock_free(root: Path) -> bool:
    try:
        fd = os.open(root / "results.db.lock", os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # the lock, where taken, goes with it
    return True


def _finish(process: subprocess.Popen, seconds: float) -> int | None:
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


def test_a_stdout_reader_that_stopped_reading_never_stalls_the_run(tmp_path: Path, stalled: tuple[int, int]) -> None:
    """Before: `farm verify --all` stayed `running` for good, its lock held, and a SIGTERM was noted
    and ignored (here the test killed it). Figure: cron's mail filter stuck, its pipe full."""
    env = _toy(tmp_path)
    _, write = stalled
    process = subprocess.Popen(
        farm_argv("verify", "--all"), cwd=tmp_path, env=env, stdout=write, stderr=subprocess.DEVNULL
    )
    os.close(write)
    stored = _wait(lambda: _runs(tmp_path) == [("finished", 0)], 60)
    code = _finish(process, 30)
    assert stored, _runs(tmp_path)
    assert code == 0
    assert _lock_free(tmp_path)


def test_a_reader_that_resumes_is_told_what_it_missed(
    stalled: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: each line's write waited for the reader (the listener's thread blocked): nothing was
    dropped, and the run waited. Figure: a mail filter stuck for a night, then reading again."""
    from orchestrator import guarded

    monkeypatch.setattr(guarded, "QUEUED", 5)  # a stalled reader's backlog, small for the test
    read, write = stalled
    stream = guarded.Guarded(os.fdopen(write, "w", encoding="utf-8", closefd=False))
    clock = time.monotonic()
    for number in range(50):
        stream.write(f"line {number}\n")
    assert time.monotonic() - clock < 5, "a write waited on the reader"
    assert stream.dropped >= 40
    said = b""
    os.set_blocking(read, False)
    deadline = time.monotonic() + 10
    while b"dropped here" not in said and time.monotonic() < deadline:  # reads again: the backlog, the note
        with contextlib.suppress(BlockingIOError):
            said += os.read(read, 65536)
        time.sleep(0.05)
    text = said.decode(errors="replace")
    assert "progress lines were dropped here while the output was not read" in text, text[-500:]
    assert "line 0\n" in text and "line 4\n" in text and "line 49" not in text, text[-500:]


def test_a_log_fifo_whose_reader_stopped_reading_never_stalls_the_run(tmp_path: Path) -> None:
    """Before: the run blocked writing `--log` once the FIFO filled (red-team 167 refused only a
    FIFO with no reader). Figure: a log shipper's FIFO, its reader hung."""
    env = _toy(tmp_path)
    fifo = tmp_path / "verify.log"
    os.mkfifo(fifo)
    read = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the shipper: open, reading nothing
    write = os.open(fifo, os.O_WRONLY)
    _fill(write)
    try:
        process = subprocess.Popen(
            farm_argv("verify", "--all", "--log", str(fifo)),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stored = _wait(lambda: _runs(tmp_path) == [("finished", 0)], 60)
        code = _finish(process, 30)
    finally:
        os.close(write)
        os.close(read)
    assert stored, _runs(tmp_path)
    assert code == 0


def test_sigterm_with_a_stalled_stderr_still_stops_the_run(tmp_path: Path, stalled: tuple[int, int]) -> None:
    """Before: the handler's "SIGTERM: stopping run" blocked on stderr before the stop began: the
    kernel ran on, the run never stopped or stored its end. Figure: `2>` a stuck pipe, systemctl stop."""
    env = _toy(tmp_path, SLEEPS)
    _, write = stalled
    process = subprocess.Popen(
        farm_argv("verify", "--all"), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=write
    )
    os.close(write)
    started = _wait(lambda: _runs(tmp_path) == [("running", None)], 60)
    time.sleep(3)  # the kernel sleeping in its run
    process.send_signal(signal.SIGTERM)
    code = _finish(process, 40)
    assert started
    assert code == 4
    assert _runs(tmp_path) == [("aborted", 4)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_after_the_run_is_stored_returns_the_stored_code(
    tmp_path: Path, stalled: tuple[int, int], signum: signal.Signals
) -> None:
    """Before: the handlers were gone once the run was stored and its lock let go: a SIGTERM then
    returned 143 (SIGHUP 129) over a run stored with exit 0. Figure: systemd stopping the unit as the
    farm writes its last lines to a stuck pipe."""
    env = _toy(tmp_path)
    _, write = stalled
    process = subprocess.Popen(farm_argv("verify", "--all"), cwd=tmp_path, env=env, stdout=write)
    os.close(write)
    ended = _wait(lambda: _runs(tmp_path) == [("finished", 0)] and _lock_free(tmp_path), 60)
    process.send_signal(signum)
    code = _finish(process, 30)
    assert ended, _runs(tmp_path)
    assert code == 0, f"the process returned {code}; the run is stored {_runs(tmp_path)}"
