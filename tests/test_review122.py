"""Review round 122: a long build log was stored as its head only.

README's "What is stored" says results keep the build log, stdout and stderr as their first and last
`output_cap / 2` bytes, with the full size and where they were cut. That held for stdout and stderr,
not for the build log: the node sent back only its first `output_cap` bytes (frames.emit, the
runner's frame, and Slurm's read of the file), so a CUTLASS template spew of megabytes was stored as
its head, nvcc's last errors and "N errors detected in the compilation" lost, and neither the cell
page, `farm show`, the JSON nor the masked-secrets note said the log was cut at all.

Now the node sends the log as one frame holding its size and, past the cap, only its first and last
`output_cap / 2` bytes (run/file_ends.py): in the same round trip, never more than the cap however
large the log (a 2 GiB one ships 4 KiB), read by its length. The log kept holds both ends with the
elision line stdout's has, `output_cuts["build_log"]` says [start, end, size], the masked note names
it, and the cell page and `farm show` say which bytes were left out. On the resident runner, a
python3 per cell, the shell scripts (ssh and local nodes) and Slurm (the stage's own job writes the
frame beside the log, read back where the log was).
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from farm_cli import farm, farm_env
from nodes import Fleet, query, standin_job, write_farm
from slurm import SlurmCluster, running_cluster
from test_faults import run_farm
from test_slurm import nvcc

from orchestrator.output_secrets import Masker, masked_note
from orchestrator.run import noderunner
from orchestrator.run.frames import FrameReader, emit

FRAMED = ".farm-ends"  # file_ends.FRAMED

if TYPE_CHECKING:
    from orchestrator.run.file_ends import FileEnds

CAP = 4096
SIZE_DIGITS = 20  # frames.SIZE_DIGITS: not imported, so that the farm's tests below ran before it was
HALF = CAP // 2
TOKEN = "0123456789ab"
FILLER = 3 << 20  # bytes of template spew between the first line and the last errors
FIRST = "FIRST-LINE-122 instantiation of cutlass::gemm::kernel::Gemm<...>"
LAST_ERROR = "kernels/k.cu(9): error: LAST-ERROR-122 no instance of overloaded function"
DETECTED = "7 errors detected in the compilation of kernels/k.cu"


def spew(token_line: str = "") -> str:
    """A build command printing a first line, 3 MiB of spew, nvcc's last error lines, and failing."""
    said = f'; echo "{token_line}"' if token_line else ""
    return (
        # it names {sources} and {binary}, as the farm asks of a build, and makes nothing
        f"true {{sources}} {{binary}}; echo '{FIRST}'; yes 'filler filler filler filler' | head -c {FILLER}; echo; "
        f"echo '{LAST_ERROR}'{said}; echo '{DETECTED}'; exit 1"
    )


def spew_size(token_line: str = "") -> int:
    lines = [FIRST, "", LAST_ERROR, *([token_line] if token_line else []), DETECTED]
    return FILLER + sum(len(line) + 1 for line in lines)


def _env() -> dict[str, str]:
    return farm_env()


# ------------------------------------------------------------------ the frame: both ends, the size, no more


def _read(out: bytes, limit: int = CAP) -> FileEnds:
    from orchestrator.run.file_ends import FileEnds

    kept = FileEnds(limit)
    reader = FrameReader(TOKEN, {"log": kept.feed}, "n")
    reader.feed(out)
    reader.finish()
    assert "log" in reader.frames
    return kept


def _shell(path: Path) -> bytes:
    script = emit(TOKEN, "log", str(path), CAP, True)
    return subprocess.run(["sh", "-c", script], capture_output=True, timeout=20, check=False).stdout


def _python(path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    out = io.BytesIO()
    monkeypatch.setattr(noderunner, "OUT", out)
    noderunner.frame(TOKEN, "log", str(path), CAP, True)
    return out.getvalue()


@pytest.mark.parametrize("sender", ["shell", "python"])
def test_a_long_logs_frame_holds_its_size_and_both_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sender: str
) -> None:
    """Before: the frame held the log's first 4096 bytes, nothing of its end, no size."""
    data = (FIRST + "\n").encode() + b"x" * FILLER + f"\n{LAST_ERROR}\n{DETECTED}\n".encode()
    path = tmp_path / "build.log"
    path.write_bytes(data)
    out = _shell(path) if sender == "shell" else _python(path, monkeypatch)
    assert len(out) < CAP + SIZE_DIGITS + 100, len(out)
    got = _read(out).finish()
    assert got.size == len(data) and got.cut == (HALF, len(data) - HALF), (got.size, got.cut)
    assert got.kept.startswith(data[:HALF]) and got.kept.endswith(data[-HALF:])
    assert f"[farm: {len(data) - CAP} bytes left out here (bytes {HALF} to {len(data) - HALF} of {len(data)})]" in (
        got.kept.decode()
    )
    assert DETECTED in got.kept.decode() and FIRST in got.kept.decode()


@pytest.mark.parametrize("sender", ["shell", "python"])
def test_a_log_within_the_cap_a_fifo_and_a_link_are_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sender: str
) -> None:
    """A short log comes whole (no cut); a FIFO or a link in its place is an empty log, never blocking."""
    send = (lambda p: _shell(p)) if sender == "shell" else (lambda p: _python(p, monkeypatch))
    short = tmp_path / "short.log"
    short.write_bytes(b"a" * CAP)
    got = _read(send(short)).finish()
    assert (got.kept, got.size, got.cut) == (b"a" * CAP, CAP, None)
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    link = tmp_path / "link.log"
    link.symlink_to(short)
    for path in (fifo, link, tmp_path / "missing.log"):
        got = _read(send(path)).finish()
        assert (got.kept, got.size, got.cut) == (b"", 0, None), path


def test_the_shell_opens_no_fifo_for_its_zero_bytes(tmp_path: Path) -> None:
    """Before (any frame, not only the log's): `[ -f ]` made its size 0, then `head -c 0 FIFO` opened
    the FIFO and blocked there: the shell runner hung to the stage's timeout on a kernel's mkfifo."""
    fifo = tmp_path / "stdout"
    os.mkfifo(fifo)
    done = subprocess.run(["sh", "-c", emit(TOKEN, "stdout", str(fifo), CAP)], capture_output=True, timeout=20)
    assert done.stdout == f"\n@@farm-frame {TOKEN} stdout 0\n\n@@farm-frame-end {TOKEN} stdout\n".encode()


@pytest.mark.parametrize("sender", ["shell", "python"])
def test_a_log_of_gigabytes_ships_no_more_than_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sender: str
) -> None:
    """A build writing 2 GiB of log: the node reads its two ends (a sparse file here: nothing is
    read between them) and the frame is the cap and its size line."""
    path = tmp_path / "huge.log"
    with open(path, "wb") as handle:
        handle.write(b"HEAD\n")
        handle.seek((2 << 30) - 5)
        handle.write(b"TAIL\n")
    out = _shell(path) if sender == "shell" else _python(path, monkeypatch)
    assert len(out) < CAP + SIZE_DIGITS + 100, len(out)
    got = _read(out).finish()
    assert got.size == 2 << 30 and got.cut == (HALF, (2 << 30) - HALF)
    assert got.kept.startswith(b"HEAD\n") and got.kept.endswith(b"TAIL\n")


def test_the_masker_masks_a_cut_logs_two_sides_apart_with_the_farms_notes_after() -> None:
    """The build log's kept copy has the farm's own notes after its tail ("[farm] build killed..."):
    its sides are found by the elision line, not by the tail's length as a stream's were."""
    from orchestrator.run.file_ends import FileEnds

    value = "tok-" + secrets.token_hex(8)
    data = b"head " + value.encode() + b"\n" + b"m" * 9000 + b"\ntail " + value.encode() + b"\n"
    kept = FileEnds(1024)
    kept.feed(b"%020d" % len(data) + data[:512] + data[-512:])
    got = kept.finish()
    assert got.cut is not None
    log = got.kept + b"\n[farm] build killed at its 60 s timeout\n"
    masker = Masker([value])
    masked = masker.kept(log, got.cut, got.size)
    assert value.encode() not in masked and masked.count(b"***") == 2, masked
    assert masked.endswith(b"tail ***\n\n[farm] build killed at its 60 s timeout\n"), masked
    note = masked_note(masker.count, {"build_log": [*got.cut, got.size]})
    assert f"build_log's bytes {got.cut[0]} to {got.cut[1]}" in note["detail"], note


# ------------------------------------------------------------------ a farm: stored, shown, named


def _job(build: str) -> dict:
    variant = {"build": build, "inspect": "objdump -d {binary}", "cc": {"min": "7.5"}}
    return standin_job("spew", {"long": variant})


def _check_stored(root: Path, config: Path, token_line: str = "") -> dict:
    size = spew_size(token_line)
    (row,) = query(root / "results.db", "SELECT * FROM results")
    assert (row["outcome"], row["failed_stage"]) == ("build-fail", "build"), (row["outcome"], row["reason"])
    log = bytes(row["build_log"]).decode()
    assert log.startswith(FIRST + "\n"), log[:200]
    assert f"{LAST_ERROR}\n" in log and f"{DETECTED}\n" in log, log[-400:]  # before: lost
    assert len(log) < CAP + 200, len(log)
    cuts = json.loads(row["output_cuts"])
    assert cuts["build_log"] == [HALF, size - HALF, size], cuts
    assert f"bytes {HALF} to {size - HALF} of {size}" in log
    assert "LAST-ERROR-122" in row["reason"], row["reason"]  # nvcc's error, read from the tail
    show = farm("show", "1", "--config", str(config), env=_env(), cwd=root)
    assert show.returncode == 0, show.stdout + show.stderr
    assert f"--- build log ({size} bytes; bytes {HALF} to {size - HALF} left out)" in show.stdout, show.stdout
    assert DETECTED in show.stdout.split("--- build log")[1]
    site = root / "site"
    done = farm("report", "--run", "1", "--out", str(site), "--config", str(config), env=_env(), cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (site / "cells" / "1.html").read_text()
    assert f'id="build-log-cut">Cut: bytes {HALF} to {size - HALF} of {size} are left out' in page, page
    assert DETECTED in page.split('<pre id="build-log">')[1]
    exported = root / "export.json"
    argv = ("report", "--run", "1", "--format", "json", "--out", str(exported), "--config", str(config))
    done = farm(*argv, env=_env(), cwd=root)
    assert done.returncode == 1, done.stdout + done.stderr  # the run's own exit: a build-fail is bad
    (cell,) = json.loads(exported.read_text())["cells"]
    assert cell["output_cuts"] == {"build_log": [HALF, size - HALF, size]}, cell["output_cuts"]
    return dict(row)


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_local_nodes_long_build_log_keeps_both_ends(tmp_path: Path, runner: str) -> None:
    """A `transport: local` node, under the resident runner and the shell scripts."""
    node = {"transport": "local", "workdir": str(tmp_path / "node"), "runner": runner}
    config = write_farm(tmp_path, {"here": node}, [_job(spew())], output_cap=CAP)
    summary, _ = run_farm(config)
    assert summary.outcomes == {"build-fail": 1}, summary.outcomes
    _check_stored(tmp_path, config)


@pytest.mark.usefixtures("runner")  # the resident runner, a python3 per cell, the shell scripts
def test_an_ssh_nodes_long_build_log_keeps_both_ends_and_the_masked_note_names_its_cut(
    ssh_fleet: Fleet, tmp_path: Path
) -> None:
    """A real sshd node; the build prints a secret of the node's env near its end: masked in the
    tail, and the note says the log's cut bytes were not counted."""
    value = "tok-" + secrets.token_hex(10)
    line = f"using VENDOR_TOKEN {value}"
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env={"VENDOR_TOKEN": value})
    config = write_farm(tmp_path, {"t4": node}, [_job(spew("using VENDOR_TOKEN $VENDOR_TOKEN"))], output_cap=CAP)
    summary, _ = run_farm(config)
    assert summary.outcomes == {"build-fail": 1}, summary.outcomes
    row = _check_stored(tmp_path, config, line)
    log = bytes(row["build_log"]).decode()
    assert value not in log and "using VENDOR_TOKEN ***" in log, log[-400:]
    masked = json.loads(row["stage_details"])["masked"]
    size = spew_size(line)
    assert f"build_log's bytes {HALF} to {size - HALF} were cut" in masked["detail"], masked


# ------------------------------------------------------------------ Slurm: the job writes the frame beside the log


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster() as c:
        yield c


def test_a_slurm_nodes_long_build_log_keeps_both_ends(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Before: the log was read back with `cat` whole (3 MiB through the login node) and its first
    4096 bytes kept. Now the build's own job writes its frame beside it, which is all that is read."""
    node = cluster.farm_entry("t4", tmp_path / "work", nvcc())
    config = write_farm(tmp_path, {"t4": node}, [_job(spew())], output_cap=CAP)
    summary, _ = run_farm(config)
    assert summary.outcomes == {"build-fail": 1}, summary.outcomes
    _check_stored(tmp_path, config)
    (framed,) = (tmp_path / "work").rglob(f"build.log{FRAMED}")
    assert framed.stat().st_size < CAP + 200, framed.stat().st_size
