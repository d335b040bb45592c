"""Red-team round 176: three leftovers of earlier rounds.

Broke (before -> after):

1. A kernel header's `Run:` line with a shell operator glued to the program (`// Run: ./k;`,
   `// Run: ./k&&./k 2`, `// Run: ./k|tee x`, `// Run: ./k>log`) was read as prose: the
   variant ran `{binary}` without a word, not what the author wrote. One with the operator
   among the arguments (`./k 4096;echo hi`, `./k &&`) was refused, but as "expected arguments
   of plain words", which did not say why. The run goes to the node's shell as the variant's one
   command (run/commands.py kernel_run), so a `;` stripped here would be a guess at what the
   author meant: every such line is now refused at load, naming the file, the line and "a single
   `./PROGRAM ARGS` command, no shell operators", as round 172 refuses `;` in a Build line.
2. Slurm's suspension was end - start - elapsed of squeue's/sacct's local wall-clock times
   without a zone: across a daylight-saving change the repeated (autumn) or skipped (spring)
   hour read as an hour suspended, or made a suspension vanish. Now the local times are
   read in the zone (a fold-aware span), see the tests below.
3. Progress lines dropped while stdout was not read (round 171's bounded queue) left a gap in
   the log without a word. Now the writer says how many were dropped once the stream drains.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import test_slurm
from slurm import SlurmCluster
from test_header_jobs import farm_dir, kernel, refused
from test_slurm import transport

from orchestrator import guarded
from orchestrator.config.farm import load_farm
from orchestrator.transport.slurm_jobs import SlurmJob, read_records
from orchestrator.transport.slurm_query import record_query

cluster = test_slurm.cluster  # a cluster of this module's own

BUILD = "// Build: nvcc -arch=sm_80 -o k k.cu\n"


@pytest.mark.parametrize(
    "run",
    ["./k;", "./k&&./k 2", "./k|tee x", "./k>log", "./k 4096;echo hi", "./k 4096;", "./k &&", "./k 4096 ; echo"],
)
def test_a_run_line_with_a_shell_operator_is_refused_naming_line_and_form(tmp_path: Path, run: str) -> None:
    """Before: `./k;`, `./k&&...`, `./k|tee`, `./k>log` loaded with the variant running `{binary}`
    (the line read as prose); the others said "expected arguments of plain words". Figure: a
    ConfigError on kernels/k.cu, line 2's Run, expecting a single `./PROGRAM ARGS` command."""
    err = refused(farm_dir(tmp_path, {"k.cu": kernel(BUILD + f"// Run: {run}\n")}))
    assert err.file == str(tmp_path / "kernels" / "k.cu")
    assert err.key == "line 2, Run", err
    assert "single `./PROGRAM ARGS` command" in err.expected and "no shell operators" in err.expected, err


def test_a_plain_run_line_and_prose_still_load(tmp_path: Path) -> None:
    """The refusal is for a line that runs a built program: `./k 4096` is its run, and a
    `Run:` of a program no Build line makes (`./other;`) is still prose."""
    lines = BUILD + "// Run: ./k 4096\n// Run: ./other; see the notes\n"
    job = load_farm(farm_dir(tmp_path, {"k.cu": kernel(lines)})).jobs["k"]
    assert {v.run for v in job.spec.variants.values()} == {"{binary} 4096"}


# ------------------------------------------------------------ 2: Slurm's times across a DST change


@pytest.fixture
def zone(request: pytest.FixtureRequest) -> Iterator[None]:
    """The process's local zone set to request.param (TZ and time.tzset), restored after."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def _suspended(line: str) -> int:
    job = SlurmJob(name="farm-x-1")
    read_records(job, "t", f"@@slurm-job-t 7|COMPLETED|n1|None|0|{line}\n")
    return job.suspended


@pytest.mark.parametrize(
    ("zone", "spring", "autumn"),
    [
        ("Europe/Berlin", "2024-03-31T01:50:00|2024-03-31T03:10:00", "2024-10-27T02:50:00|2024-10-27T02:10:00"),
        ("America/New_York", "2024-03-10T01:50:00|2024-03-10T03:10:00", "2024-11-03T01:50:00|2024-11-03T01:10:00"),
    ],
    indirect=["zone"],
)
def test_a_dst_change_between_start_and_end_reads_no_suspension(zone: None, spring: str, autumn: str) -> None:
    """Before: a job run 01:50 to 03:10 local across the spring change (20 min of run time, 20 min
    Elapsed) read as 3600 s suspended: infra-error, a retry, for a job Slurm never stopped. Figure:
    0 across either change (the autumn's repeated hour read either way)."""
    assert _suspended(f"{spring}|20:00") == 0
    assert _suspended(f"{autumn}|20:00") == 0  # 02:50 CEST -> 02:10 CET: 20 min
    assert _suspended(f"{spring}|10:00") == 600  # a real suspension across the change still counts


def test_slurms_epoch_times_give_the_suspension_in_any_zone() -> None:
    """The query asks squeue and sacct for epoch seconds (SLURM_TIME_FORMAT=%s): no zone to guess.
    Before: an epoch read as no time (0 suspended, a suspension unseen). Figure: span less Elapsed."""
    assert "SLURM_TIME_FORMAT=%s squeue" in record_query("farm-x-1", "t", 4)
    assert "SLURM_TIME_FORMAT=%s sacct -X" in record_query("farm-x-1", "t", 4)
    # 2024-10-27 00:10 UTC to 01:20 UTC (Berlin's repeated hour), 10 min of run time: 60 min suspended
    assert _suspended("1729987800|1729992000|10:00") == 3600
    assert _suspended("1729987800|1729992000|1:10:00") == 0


def test_the_real_squeue_and_sacct_print_epoch_times(cluster: SlurmCluster) -> None:
    """The cluster's own squeue and sacct take SLURM_TIME_FORMAT=%s (a Slurm that did not would give
    its local times, read by the zone rule above). Figure: squeue's %S is digits for a job that ran."""
    with transport(cluster, "t4") as t:
        t.run("true", timeout=30)
        ident = t.last_job_id
    env = {**cluster.env, "SLURM_TIME_FORMAT": "%s"}
    done = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", str(ident), "-o", "%S|%e|%M"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    start, end, _ = done.stdout.strip().split("|")
    assert start.isdigit() and end.isdigit() and abs(int(start) - time.time()) < 600, done.stdout


# ------------------------------------------------- 3: progress lines dropped while stdout was not read

_NOTE = re.compile(r"farm: (\d+) progress lines were dropped here while the output was not read")


def _stalled_pipe() -> tuple[int, int]:
    """A pipe (read end, write end) shrunk to a page and full: its reader alive and not reading."""
    read, write = os.pipe()
    fcntl.fcntl(write, 1031, 4096)  # F_SETPIPE_SZ
    os.set_blocking(write, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write, b"x" * 512)
    os.set_blocking(write, True)
    return read, write


def _read_until(read: int, said: bytearray, end: Callable[[str], bool]) -> None:
    """The reader reading again, into `said`, until `end` holds of all it read."""
    os.set_blocking(read, False)
    deadline = time.monotonic() + 10
    while not end(said.decode(errors="replace")) and time.monotonic() < deadline:
        with contextlib.suppress(BlockingIOError):
            said += os.read(read, 65536)
        time.sleep(0.02)


@pytest.mark.parametrize("later", [True, False])
def test_dropped_lines_are_said_where_the_gap_is(monkeypatch: pytest.MonkeyPatch, later: bool) -> None:
    """Before: the note ("N progress lines were not written here") went out before the first line of
    the backlog queued ahead of the gap (`line 0`, note, `line 1`...`line 5`): the operator read a
    gap where there was none, and none where the lines were missing. Figure: a reader that stalls for
    50 lines of a 5-line queue, then reads again: the kept lines, then one note whose count is the
    lines missing, then the next line (or, with none, the note at the stream's end)."""
    monkeypatch.setattr(guarded, "QUEUED", 5)
    read, write = _stalled_pipe()
    try:
        stream = guarded.Guarded(os.fdopen(write, "w", encoding="utf-8", closefd=False))
        for number in range(50):
            stream.write(f"line {number}\n")
        said = bytearray()
        if later:  # the run goes on once the reader reads again
            _read_until(read, said, lambda text: "line 4\n" in text)
            stream.write("line 50\n")
            _read_until(read, said, lambda text: "line 50\n" in text)
        else:  # the run ends meanwhile: its exit settles the stream
            settling = threading.Thread(target=stream.settle, args=(5.0,))
            settling.start()
            _read_until(read, said, lambda text: "not read\n" in text)
            settling.join(10)
    finally:
        os.close(read)
        os.close(write)
    lines = [line for line in said.decode(errors="replace").lstrip("x").splitlines() if line]  # the filler dropped
    notes = [at for at, line in enumerate(lines) if _NOTE.fullmatch(line)]
    assert len(notes) == 1, lines
    kept = lines[: notes[0]]
    assert kept == [f"line {n}" for n in range(len(kept))], lines  # the backlog, whole and in order
    missed = int(_NOTE.fullmatch(lines[notes[0]])[1])
    assert missed == 50 - len(kept), lines
    assert lines[notes[0] + 1 :] == (["line 50"] if later else []), lines
