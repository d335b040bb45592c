"""Review round 126: Slurm's read-back followed a link and opened a FIFO.

On streaming transports (ssh, local) the files a stage sends back (build log, the kernel's stdout
and stderr, its status and other-output files, the sanitizer logs) are framed on the node from a
regular file only, never through a link, never by opening a FIFO (frames.emit, node/stage_flow.frame):
a build once made its build.log a link to a file of the node's user, and the farm stored and
published it. Slurm's stages cannot stream: their files come back in round trips of their own
(file_ends.read_back), through the transport's `stream(path)`, the login node's `cat` (ssh) or
open() (the farm's own machine). Before: that read FOLLOWED a link, so a kernel that replaced its
stdout, stderr or other-output file with a link to ~/.ssh/id_ed25519 had that key stored in
results.db and shown by `farm show` and the cell page; and it BLOCKED on a FIFO put in a file's
place, so the cell hung past every budget (the read has no timeout of its own). The sanitize stage's
tool logs came back the same way on Slurm.

Now `stream` reads a regular file only, not through a link (a link, a FIFO, a folder: an empty
stream, as the streaming runners send an empty frame), and no more than the bytes the farm keeps
(`limit`): the same rule, and the same verdict, on every transport. What held: Slurm's build log,
which the build's own job frames beside it with frames.emit (round 122), never followed a link.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm, farm_env
from nodes import CARDS, nvidia_smi_script, smi_on_path, standin_job, standin_variant, write_farm
from slurm import SlurmCluster, running_cluster
from test_slurm import nvcc, transport

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.run.file_ends import read_back
from orchestrator.transport import transport_for

SECRET = "SECRET-126-" + secrets.token_hex(8)
BUDGET = 150  # seconds a cell here may take, end to end: its run's own timeout is 30


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster() as c:
        yield c


def secret_file(root: Path) -> Path:
    """A file of the node's user (the farm's own machine is the login node) holding a distinctive string."""
    path = root / "id_ed25519"
    path.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n")
    path.chmod(0o600)
    return path


def everything_stored(db: Path) -> str:
    """Every value of every table of results.db, as text: the secret must be in none."""
    con = sqlite3.connect(db)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = []
        for table in tables:
            for row in con.execute(f"SELECT * FROM {table}"):  # the database's own table names
                out += [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in row]
        return "\n".join(out)
    finally:
        con.close()


def verify(root: Path, config: Path) -> dict[str, str]:
    """`farm verify` through the CLI, bounded: a read-back blocked on a FIFO is a hang, never a wait."""
    try:
        done = farm("verify", "--all", "--config", str(config), env=farm_env(), cwd=root, timeout=BUDGET)
    except Exception as err:  # subprocess.TimeoutExpired: the farm never ended (before: a FIFO's open)
        pytest.fail(f"the farm did not end within {BUDGET} s: {type(err).__name__}")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    con = sqlite3.connect(root / "results.db")
    con.row_factory = sqlite3.Row
    try:
        (row,) = con.execute("SELECT * FROM results").fetchall()
    finally:
        con.close()
    return {k: row[k] for k in ("outcome", "failed_stage", "reason", "stdout", "stderr")}


def no_secret_published(root: Path, config: Path) -> None:
    assert SECRET not in everything_stored(root / "results.db")
    show = farm("show", "1", "--config", str(config), env=farm_env(), cwd=root)
    assert show.returncode == 0, show.stdout + show.stderr
    assert SECRET not in show.stdout + show.stderr
    site = root / "site"
    done = farm("report", "--run", "1", "--out", str(site), "--config", str(config), env=farm_env(), cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    pages = [p.read_text(errors="replace") for p in site.rglob("*.html")]
    assert pages and (site / "cells" / "1.html").exists()
    assert not [p for p in pages if SECRET in p]


def _job(root: Path, prelude: str) -> dict:
    """The stand-in, passing, but that it first runs PRELUDE (the kernel's own doings; a run of other
    commands after it the schema refuses)."""
    script = root / "prelude.sh"
    root.mkdir(parents=True, exist_ok=True)
    script.write_text(prelude + "\n")
    return standin_job("linked", {"v": standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=script)})


# the kernel's cwd is the cell's work folder: its stdout, stderr and other-output file lie one up
LINK_RUN = "for f in stdout stderr .farm-other; do rm -f ../$f; ln -s %s ../$f; done; echo printed-126"
FIFO_RUN = "for f in stdout stderr .farm-other; do rm -f ../$f; mkfifo ../$f; done; echo printed-126"


def local_node(root: Path) -> dict:
    return {"transport": "local", "workdir": str(root / "node"), "runner": "shell"}


def slurm_node(cluster: SlurmCluster, root: Path) -> dict:
    return cluster.farm_entry("t4", root / "work", nvcc())


# ------------------------------------------------------------------ what held: the build log


def test_a_slurm_builds_log_made_a_link_sends_back_nothing_of_its_target(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Held before: the build's own job frames its log beside it with frames.emit, which reads no link."""
    secret = secret_file(tmp_path)
    build = f"true {{sources}} {{binary}}; echo compiling; ln -sf {secret} build.log; exit 1"
    job = standin_job("linked", {"v": {"build": build, "inspect": "objdump -d {binary}", "cc": {"min": "7.5"}}})
    config = write_farm(tmp_path, {"t4": slurm_node(cluster, tmp_path)}, [job])
    row = verify(tmp_path, config)
    assert (row["outcome"], row["failed_stage"]) == ("build-fail", "build"), row
    no_secret_published(tmp_path, config)
    assert SECRET in secret.read_text()  # nothing wrote through the link either


# ------------------------------------------------------------------ what broke: the run's files


def _same_as_the_streaming_runner(tmp_path: Path, run: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The local shell runner's verdict on the same job (its files framed by frames.emit), on a T4
    stand-in as Slurm's t4 partition has."""
    root = tmp_path / "local"
    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    secret_file(root.parent)
    config = write_farm(root, {"here": local_node(root)}, [_job(root, run)])
    row = verify(root, config)
    no_secret_published(root, config)
    return row


def test_a_slurm_kernels_files_made_links_send_back_nothing_of_their_target(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: Slurm's read-back (`stream`, the login node's open()) followed the links: the key
    was the cell's stdout, stderr and reason in results.db, `farm show` and the cell page."""
    secret = secret_file(tmp_path)
    run = LINK_RUN % secret
    root = tmp_path / "slurm"
    config = write_farm(root, {"t4": slurm_node(cluster, root)}, [_job(root, run)])
    row = verify(root, config)
    assert SECRET not in str(row), row
    no_secret_published(root, config)
    streamed = _same_as_the_streaming_runner(tmp_path, run, monkeypatch)
    # the same verdict as the streaming runners': the files read empty, the pass marker unseen
    assert row["outcome"] != "pass" and row["outcome"] == streamed["outcome"], (row, streamed)
    assert (row["failed_stage"], row["stdout"], row["stderr"]) == ("run", b"", b""), row
    assert SECRET in secret.read_text()


def test_a_slurm_kernels_files_made_fifos_end_within_the_budget(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the read-back opened the FIFO put in stdout's place and blocked there: the farm never
    ended (killed at BUDGET s here). Now it reads nothing of it, as the streaming runners do, and
    the cell is what theirs is: a fail whose reason names the run files gone when its run ended
    (lost_files.py: an unconfined kernel may have removed them), never a pass."""
    root = tmp_path / "slurm"
    config = write_farm(root, {"t4": slurm_node(cluster, root)}, [_job(root, FIFO_RUN)])
    row = verify(root, config)
    streamed = _same_as_the_streaming_runner(tmp_path, FIFO_RUN, monkeypatch)
    assert row["outcome"] != "pass" and row["outcome"] == streamed["outcome"], (row, streamed)
    assert row["failed_stage"] == "run", row
    said = "run files on the node (stdout stderr .farm-other) were gone"
    assert said in row["reason"] and said in streamed["reason"], (row["reason"], streamed["reason"])


# ------------------------------------------------------------------ read_back itself: the sanitize logs' path too


@pytest.mark.parametrize("login", ["local", "ssh"])
def test_slurms_read_back_reads_regular_files_only_and_no_more_than_kept(
    cluster: SlurmCluster, tmp_path: Path, login: str, request: pytest.FixtureRequest
) -> None:
    """read_back of files not sent by their ends (the run's files, the sanitize stage's tool logs):
    a link, a FIFO and a folder read empty, at once; a regular file as it is, to its limit only.
    The login node on the farm's own machine (open()) and over OpenSSH (before: `cat`)."""
    if login == "ssh":
        ssh = request.getfixturevalue("ssh_fleet")["nogpu"]  # the files are on this host: the fleet's too
        entry = {**ssh.farm_entry(tmp_path), **cluster.farm_entry("t4", tmp_path, "nvcc")}
        t = transport_for("viassh", NodeSpec(**entry))
    else:
        t = transport(cluster, "t4")
    secret = secret_file(tmp_path)
    (tmp_path / "linked.log").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo.log")
    (tmp_path / "folder.log").mkdir()
    (tmp_path / "memcheck.log").write_bytes(b"========= ERROR SUMMARY: 0 errors\n" + b"x" * 5000)
    got: dict[str, bytearray] = {n: bytearray() for n in ("linked", "fifo", "folder", "memcheck", "missing")}
    files = [(n, str(tmp_path / f"{n}.log"), 1000, got[n].extend) for n in got]
    done: list[BaseException | None] = []

    def read() -> None:
        try:
            with t:
                read_back(t, "0123456789ab", files, ())
            done.append(None)
        except BaseException as err:  # handed to the test's thread
            done.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():  # before: blocked in the FIFO's open; unblocked here so the thread ends
        with open(tmp_path / "fifo.log", "wb"):
            pass
        reader.join(10)
        pytest.fail("read_back blocked on a FIFO")
    assert done == [None], done
    assert {n: bytes(v) for n, v in got.items() if n != "memcheck"} == dict.fromkeys(
        ("linked", "fifo", "folder", "missing"), b""
    )
    assert bytes(got["memcheck"]) == (b"========= ERROR SUMMARY: 0 errors\n" + b"x" * 5000)[:1000]
