"""The node-side cell runner (orchestrator/run/noderunner.py) speaks the shell
scripts' protocol: the same digests, frames and verdicts, with either runner.

The folder digest is what decides whether staged sources, dependencies and a
shipped toolkit are the farm's own: the runner's must equal the shell's (and the
farm's) on awkward folders, or every build would be refused, or worse, accepted
on the wrong bytes. What a build or an inspection does to its own inputs is
caught by both runners, on real sshd nodes.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import json
import marshal
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm_env
from nodes import (
    CARDS,
    Card,
    Fleet,
    SshNode,
    install_sanitizer,
    landlock_abi,
    lose_card_after_probe,
    own_sleep,
    processes_matching,
    query,
    standin_job,
    standin_variant,
    write_farm,
)

from orchestrator.config import kernel_calls
from orchestrator.config.farm import load_farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.config.inputs import FOLDER_DIGEST_SH, file_sha256, files_digest
from orchestrator.plan import plan_cells
from orchestrator.report.site import render
from orchestrator.run import bundle, cell, commands, noderunner, resident, staging
from orchestrator.run.probe import probe, resident_probe
from orchestrator.run.probe_output import _python
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store
from orchestrator.transport import Transport, transport_for

MIN75 = {"min": "7.5"}


def shell_digest(folder: Path) -> str:
    return subprocess.run(
        ["sh", "-c", f"cd '{folder}' && {FOLDER_DIGEST_SH}"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_cells_folder_is_made_while_another_cells_clean_up_removes_its_parents(tmp_path: Path) -> None:
    """A cell's clean-up (remove_cell) removes its node's and run's folders once they
    look empty, which raced the next cell's copy into its own folder there: the parent
    went between the makedirs's check and its mkdir, the copy failed, and the cell was
    an infra attempt, retried after a second (seen in 3 of 5 fleet runs of fast cells;
    here about 1 in 5 tries failed). The folder is made again."""
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x7fELF" * 64)
    node = tmp_path / "cells" / "run" / "node"
    stop = threading.Event()

    def other_cells() -> None:
        while not stop.is_set():
            for name in ("a", "b"):
                folder = str(node / name)
                noderunner.take_copy(str(binary), folder, f"{folder}/work/binary")
                noderunner.remove_cell(folder)

    churn = threading.Thread(target=other_cells, daemon=True)
    churn.start()
    failed = 0
    try:
        for _ in range(1500):
            folder = str(node / "mine")
            failed += not noderunner.take_copy(str(binary), folder, f"{folder}/work/binary")
            noderunner.remove_cell(folder)
    finally:
        stop.set()
        churn.join()
    assert failed == 0


def _bundle_folder(root: Path, files: int = 20) -> tuple[Path, str]:
    source = root / "src"
    (source / "d").mkdir(parents=True)
    for i in range(files):
        (source / "d" / f"h{i}.h").write_text(f"// {i}\n")
    return source, noderunner.folder_digest(str(source))


class _Flushes(io.BytesIO):
    """OUT, noting what had been written at each flush (each a message to the farm)."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[bytes] = []

    def flush(self) -> None:
        self.at.append(self.getvalue())


def test_a_stages_start_is_sent_at_once_only_where_the_farms_deadline_moves(monkeypatch) -> None:
    """The runner sent each stage's start as it began, the first one's too, in a
    message of its own (each costs the farm CPU) so that the farm could move its
    deadline on. The first stage's deadline is the farm's from the start: its start
    now goes with what follows. A later stage's goes at once where the farm's deadline
    moves (later: it must not give up too soon; sooner: it must not wait on a silent
    node longer than the stage could take), and else with what follows. The resident
    runner holds what its cell writes (noderunner.HOLD), so there each goes at once."""

    def stage(out, spec, env, ahead) -> None:
        out.say("@@farm rc=0")

    monkeypatch.setattr(noderunner, "STAGES", dict.fromkeys(("build", "inspect", "run"), stage))
    monkeypatch.setattr(noderunner, "gate", lambda *_: True)
    monkeypatch.setattr(noderunner, "subreaper", lambda: False)

    monkeypatch.setattr(noderunner, "LOGIN_ENV", {})

    def sent(timeouts: list[float], batched: bool = False) -> list[bytes]:
        out = _Flushes()
        monkeypatch.setattr(noderunner, "OUT", out)
        stages = [
            {"stage": name, "timeout": t, "spec": {}, "files": [], "clean_up": False}
            for name, t in zip(("build", "inspect", "run"), timeouts, strict=True)
        ]
        plan = {"token": "t", "together": True, "batched": batched, "marker": {}, "stages": stages}
        # in a thread of its own: run_plan blocks SIGCHLD in its thread (the runner's whole
        # process), which left in pytest's own thread hung the worker tests run after it
        thread = threading.Thread(target=noderunner.run_plan, args=(plan,))
        thread.start()
        thread.join(30)
        return out.at

    (whole,) = sent([600.0, 600.0, 600.0])  # the stages' deadlines all but the same: one message
    assert whole.count(b"@@farm section ") == 3 and whole.endswith(b"@@farm ran build inspect run\n")
    # inspect's deadline later than the build's, the run's sooner than inspect's: each start at once
    first, second, whole = sent([155.0, 330.0, 95.0])
    assert first.endswith(b"@@farm section inspect " + first.rsplit(b" ", 1)[1]) and b"section run" not in first
    assert second.endswith(b"@@farm section run " + second.rsplit(b" ", 1)[1])
    assert b"@@farm section build" in first and whole.endswith(b"@@farm ran build inspect run\n")
    # under the resident runner, which holds what it is sent: every later start at once
    first, second, whole = sent([600.0, 600.0, 600.0], batched=True)
    assert first.endswith(b"@@farm section inspect " + first.rsplit(b" ", 1)[1])
    assert second.endswith(b"@@farm section run " + second.rsplit(b" ", 1)[1])


def test_two_placers_of_one_altered_bundle_at_once_both_place_it(tmp_path: Path) -> None:
    """Two farm nodes naming one machine found its copy altered and place the bundle at
    once: one set the altered copy aside while the other was about to, and its rename
    failed (seen in about 1 of 4 such pairs: an infra error and a retry). Both place it
    now; the copy there is intact and nothing is left beside it."""
    import multiprocessing

    source, digest = _bundle_folder(tmp_path)
    files = [(str(p.relative_to(source)), p.read_bytes(), False) for p in sorted(source.rglob("*.h"))]
    context = multiprocessing.get_context("fork")
    said: list[str] = []
    for attempt in range(40):
        final = tmp_path / f"w{attempt}" / "bundles" / digest
        shutil.copytree(source, final)
        (final / "d" / "h0.h").write_text("altered\n")
        barrier, answers = context.Barrier(2), context.Queue()

        def placer(final: Path = final, barrier=barrier, answers=answers) -> None:
            noderunner.OUT = io.BytesIO()
            barrier.wait()
            one = {"digest": digest, "folder": str(final), "name": "dependency x", "files": files}
            noderunner.place({"bundles": [one]})
            answers.put(noderunner.OUT.getvalue().decode())

        placers = [context.Process(target=placer) for _ in range(2)]
        for process in placers:
            process.start()
        said += [answers.get(timeout=30), answers.get(timeout=30)]
        for process in placers:
            process.join()
        assert noderunner.folder_digest(str(final)) == digest
        assert os.listdir(final.parent) == [digest]
    assert [line for line in said if "unplaced" in line] == []


@pytest.mark.parametrize("there", ["nothing", "altered"])
def test_two_extracting_scripts_of_one_bundle_at_once_both_place_it(tmp_path: Path, there: str) -> None:
    """The tar.gz path (a bundle over INLINE_BYTES: CUTLASS, a toolkit; a node without
    python3; every re-staging) of two columns of one machine at once: it checked for
    an intact copy, then removed what was there and moved its own in, so one failed
    (Directory not empty) in about half of such pairs, or removed the copy the other
    had just placed. Both place it now, and the copy is intact throughout."""
    source, _ = _bundle_folder(tmp_path)
    one = bundle.Bundle.of_folder("dependency x", source)
    node = NodeSpec(transport="local")
    failed: list[str] = []
    for attempt in range(30):
        work = tmp_path / f"w{attempt}"
        (work / "incoming").mkdir(parents=True)
        final = Path(bundle.remote_dir(str(work), one))
        if there == "altered":
            shutil.copytree(source, final)
            (final / "d" / "h0.h").write_text("altered\n")
        start = threading.Barrier(2)

        def ship(work: Path = work, start: threading.Barrier = start) -> None:
            with transport_for("here", node) as transport:
                start.wait()
                try:
                    staging.ship(transport, str(work), [(one, "x")], tmp_path / "cache", runner=None)
                except staging.StagingFailed as err:
                    failed.append(str(err))

        shippers = [threading.Thread(target=ship) for _ in range(2)]
        for thread in shippers:
            thread.start()
        for thread in shippers:
            thread.join(60)
        assert noderunner.folder_digest(str(final)) == one.digest
        assert os.listdir(final.parent) == [one.digest]
    assert failed == []


def build_spec(build_dir: Path, run_dir: Path, command: str, inputs: list[list[str]]) -> dict[str, object]:
    """A build stage's spec, as run/stages/build.py sends it to the runner (binary `kern`)."""
    return {
        "reuse": False,
        "build_dir": str(build_dir),
        "binary": f"{build_dir}/kern",
        "run_dir": str(run_dir),
        "private": f"{run_dir}/work/kern",
        "command": command,
        "limit": 30,
        "tmp": f"{build_dir}/.farm-tmp",
        "inputs": inputs,
    }


def test_a_build_whose_input_was_put_in_place_again_meanwhile_is_no_evidence(tmp_path: Path) -> None:
    """Another cell found a shared dependency altered (a kernel wrote into it) and
    staged it again while this cell's nvcc read it: the digest after the build was the
    good one again, so a binary built from the altered header passed as built from
    the good one, marked reusable. The folder is another folder now (its inode), and
    the build says so: altered-during, no copy, not reusable. Runner and shell alike."""
    source, digest = _bundle_folder(tmp_path)
    final = tmp_path / "bundles" / digest
    shutil.copytree(source, final)
    fresh = tmp_path / "bundles" / f"{digest}.part.1"
    shutil.copytree(source, fresh)
    swap = f"{{ sleep 0.3; mv -T {final} {final}.old && mv -T {fresh} {final}; }} &"
    # the build reads the header while it is altered; the swap puts the good copy back meanwhile
    command = f"printf altered > {final}/d/h0.h; cat {final}/d/h0.h > kern; sleep 0.8"
    build_dir = tmp_path / "builds" / "n" / "k-v-key"
    run_dir = tmp_path / "cells" / "r" / "n" / "k-v"
    spec = build_spec(build_dir, run_dir, command, [["dependency:x", str(final), digest]])
    subprocess.run(["sh", "-c", swap], check=True)
    out = noderunner.Stage()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # as run_plan does
    try:
        noderunner.build(out, spec, dict(os.environ), {})
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    said = out.text.decode()
    assert "@@farm altered-during dependency:x replaced" in said, said
    assert not (build_dir / ".farm-built").exists() and not run_dir.exists()
    # the shell scripts' check: the same swap between the two halves of the script
    paths = cell.CellPaths(
        sources=bundle.Placed(str(final), digest),
        dependencies={},
        build_key="k",
        build_dir=str(build_dir),
        binary=f"{build_dir}/kern",
        run_dir=str(run_dir),
    )
    shutil.copytree(source, fresh)
    script = (
        f"{commands.verify_inputs_script(paths, 'altered')}; echo before=$bad; "
        f"mv -T {final} {final}.older && mv -T {fresh} {final}; "
        f"{commands.verify_inputs_script(paths, 'altered-during')}; echo after=$bad"
    )
    said = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    assert "before=\n" in said and "@@farm altered-during sources replaced" in said and "after=1" in said, said


BUILD_ONE = """
import json, os, signal, sys
from orchestrator.run import noderunner
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # as run_plan does
out = noderunner.Stage()
noderunner.build(out, json.loads(sys.argv[1]), dict(os.environ), {})
sys.stdout.write(out.text.decode())
"""


def test_two_farms_building_one_cell_in_one_workdir_take_turns(tmp_path: Path) -> None:
    """Two farms with their own databases (so no run lock between them) on one node and
    workdir build the same cell at once: each build removes and refills the same build
    folder, so the second removed the first's while its compiler wrote there (the
    first failed: no binary). The build folder's lock makes them take turns: both
    build, each copies its own binary."""
    build_dir = tmp_path / "builds" / "n" / "k-v-key"
    procs = []
    for name in ("a", "b"):
        run_dir = tmp_path / "cells" / name / "n" / "k-v"
        spec = build_spec(build_dir, run_dir, f"sleep 0.6 && echo {name} > kern", [])
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", BUILD_ONE, json.dumps(spec)],
                stdout=subprocess.PIPE,
                text=True,
                env=farm_env(),  # this checkout's orchestrator, whatever the cwd
            )
        )
    said = [proc.communicate(timeout=30)[0] for proc in procs]
    for name, text in zip(("a", "b"), said, strict=True):
        assert "@@farm rc=0" in text, text
        copy = tmp_path / "cells" / name / "n" / "k-v" / "work" / "kern"
        assert copy.read_text() == f"{name}\n"
        assert f"@@farm copy {noderunner.sha_of(str(copy))}" in text, text


def test_the_runners_folder_digest_is_the_shells(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "empty-dir").mkdir()
    (tree / "a" / "b" / "deep.h").write_text("#pragma once\n")
    (tree / "a" / "x.cu").write_bytes(bytes(range(256)))
    (tree / "sp ace.txt").write_text("space\n")
    (tree / "back\\slash").write_text("escaped by sha256sum\n")
    (tree / "A-upper").write_text("sorts before a\n")
    (tree / "zero").write_bytes(b"")
    os.symlink("a/x.cu", tree / "link-to-file")
    os.symlink("a", tree / "link-to-dir")
    assert noderunner.folder_digest(str(tree)) == shell_digest(tree)
    # a folder of regular files only: the farm's own computation, from the hashes it shipped
    plain = tmp_path / "plain"
    (plain / "include" / "cute").mkdir(parents=True)
    for rel, text in {"include/cute/t.hpp": "t", "include/a.h": "a", "B.h": "b", "z": ""}.items():
        (plain / rel).write_text(text)
    files = {str(p.relative_to(plain)): file_sha256(p) for p in plain.rglob("*") if p.is_file()}
    assert noderunner.folder_digest(str(plain)) == files_digest(files) == shell_digest(plain)
    assert noderunner.folder_digest(str(tmp_path / "missing")) == ""
    # one byte changed is another digest
    (plain / "z").write_text("!")
    assert noderunner.folder_digest(str(plain)) != files_digest(files)


def test_a_frame_of_a_fifo_or_a_missing_file_is_empty_and_never_blocks(tmp_path: Path, monkeypatch) -> None:
    out = io.BytesIO()
    monkeypatch.setattr(noderunner, "OUT", out)
    fifo = tmp_path / "stdout"
    os.mkfifo(fifo)
    done = threading.Event()
    thread = threading.Thread(
        target=lambda: (noderunner.frame("0123456789ab", "stdout", str(fifo), 100), done.set()), daemon=True
    )
    thread.start()
    assert done.wait(5), "a FIFO in place of the kernel's stdout held the runner"
    noderunner.frame("0123456789ab", "stderr", str(tmp_path / "missing"), 100)
    (tmp_path / "big").write_bytes(b"x" * 300)
    noderunner.frame("0123456789ab", "log", str(tmp_path / "big"), 100)
    assert out.getvalue() == (
        b"\n@@farm-frame 0123456789ab stdout 0\n\n@@farm-frame-end 0123456789ab stdout\n"
        b"\n@@farm-frame 0123456789ab stderr 0\n\n@@farm-frame-end 0123456789ab stderr\n"
        b"\n@@farm-frame 0123456789ab log 100\n" + b"x" * 100 + b"\n@@farm-frame-end 0123456789ab log\n"
    )


def test_the_probe_takes_python3_only_at_38_and_by_its_own_path() -> None:
    assert _python(["/usr/bin/python3.12", "True"]) == "/usr/bin/python3.12"
    assert _python(["/usr/bin/python3.6", "False"]) is None
    assert _python([]) is None  # no python3 on the node: the shell scripts
    assert _python(["python3", "True"]) is None  # not a path the farm can start again


def verify(
    fleet: Fleet | dict[str, SshNode], root: Path, variants: dict[str, dict[str, object]], **entry: object
) -> list[sqlite3.Row]:
    farm_file = write_farm(
        root, {"t4": fleet["t4"].farm_entry(root / "work", **entry)}, [standin_job("standin", variants)], retries=0
    )
    farm = load_farm(farm_file)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm, None, None), cache_dir=root / "cache")
    finally:
        store.close()
    found = {
        r["variant"]: r for r in query(root / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    }
    return [found[name] for name in variants]


def test_inputs_changed_while_nvcc_ran_and_a_binary_changed_in_inspection_get_no_verdict(
    ssh_fleet: Fleet, tmp_path: Path, runner: str
) -> None:
    """A build that appends to its own staged source, and an inspection that rewrites
    the cell's copy of the binary after it disassembled it: neither cell can be
    judged (infra-error, at its stage), and neither binary is remembered as built. The
    python runners confine both (a build to its folder, an inspection to its work folder):
    there each write is refused, and the cell fails at that stage."""
    build = "g++ -O1 -DMODE_PASS -DMIN_CC=75 -o {binary} {sources} && echo '// changed' >> {sources}"
    # each in a farm of its own: the changed source is every build's of its farm
    (during,) = verify(ssh_fleet, tmp_path / "a", {"during": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)})
    rewrite = "objdump -d {binary} && echo x >> {binary}"
    variants = {
        # counting nothing: a dump that counts instructions is one command (config/stage_commands.py)
        "inspect": standin_variant("PASS", MIN75, "MIN_CC=75", inspect=rewrite, instructions={}),
        "good": standin_variant("PASS", MIN75, "MIN_CC=75"),
    }
    inspect, good = verify(ssh_fleet, tmp_path / "b", variants)
    assert good["outcome"] == "pass"
    if runner != "shell":
        assert (during["outcome"], during["failed_stage"]) == ("build-fail", "build"), during["reason"]
        assert b"Permission denied" in bytes(during["build_log"])
        assert (inspect["outcome"], inspect["failed_stage"]) == ("inspect-fail", "inspect"), inspect["reason"]
        return
    assert (during["outcome"], during["failed_stage"]) == ("infra-error", "build"), during["reason"]
    assert "inputs changed on the node while nvcc ran (sources)" in during["reason"]
    assert (inspect["outcome"], inspect["failed_stage"]) == ("infra-error", "inspect"), inspect["reason"]
    assert "inspection" in inspect["reason"]


@pytest.fixture(scope="module")
def own_home_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNode]:
    """A node whose login has an empty HOME: no ~/.bashrc puts a python3 ahead of its PATH."""
    fleet = Fleet(tmp_path_factory.mktemp("home"))
    node = fleet.add("t4", CARDS["t4"], start=False)
    # LANG=C: a locale python3 coerces to C.UTF-8 in its own environment (PEP 538); its HOME
    # is empty, as every test node's is (nodes.py)
    node.config.write_text(node.config.read_text().replace("SetEnv HOME=", "SetEnv LANG=C HOME="))
    node.start()
    yield node
    fleet.stop()


def test_a_node_whose_python3_is_older_than_38_keeps_the_shell(own_home_node: SshNode, tmp_path: Path) -> None:
    """A python3 that says it is older than 3.8 (a shim first on the node's PATH,
    answering the probe as Python 3.7 would) runs no cell: the shell scripts do,
    and the node's snapshot says so; with the node's own python3, the runner."""
    fleet = {"t4": own_home_node}
    shim = own_home_node.node_bin / "python3"
    shim.write_text("#!/bin/sh\necho /usr/bin/python3.7; echo False\n")
    shim.chmod(0o755)
    try:
        (old,) = verify(fleet, tmp_path / "old", {"plain": standin_variant("PASS", MIN75, "MIN_CC=75")})
    finally:
        shim.unlink()
    (new,) = verify(fleet, tmp_path / "new", {"plain": standin_variant("PASS", MIN75, "MIN_CC=75")})
    assert old["outcome"] == new["outcome"] == "pass"
    ((was,),) = query(tmp_path / "old" / "results.db", "SELECT runner FROM node_snapshots")
    ((now,),) = query(tmp_path / "new" / "results.db", "SELECT runner FROM node_snapshots")
    assert (was, now.split()[0]) == ("shell", "python3"), (was, now)


# what differs between two logins (their ports), what a shell sets itself, and the cell's own marker
VOLATILE = ("_", "OLDPWD", "SSH_CLIENT", "SSH_CONNECTION", "FARM_CELL", "FARM_RUN")


def test_a_kernel_sees_the_same_environment_with_either_runner(
    own_home_node: SshNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's environment is the login's plus the cell's marker and its own
    TMPDIR, whoever starts it: python3 adds LC_CTYPE to its own in a C locale (PEP 538), which
    the runner must not pass on. Compared key by key, but for what a shell sets
    itself (`_`) and the cell's own marker."""
    seen = {}
    for runner in ("shell", "auto", "cell"):
        monkeypatch.setenv("FARM_TEST_RUNNER", runner)
        # the kernel's own, on its stderr: it may write no file outside its own work folder (confined)
        prelude = tmp_path / f"env-{runner}.sh"
        prelude.write_text("(printf 'ENV:'; env -0 | base64 -w0; echo) >&2\n")
        (row,) = verify(
            {"t4": own_home_node},
            tmp_path / runner,
            {"env": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)},
        )
        assert row["outcome"] == "pass"
        (line,) = (line for line in bytes(row["stderr"]).decode().splitlines() if line.startswith("ENV:"))
        dump = base64.b64decode(line[4:]).decode()
        pairs = (item.partition("=") for item in dump.split("\0") if "=" in item)
        env = {k: v for k, _, v in pairs if k not in VOLATILE}
        env["PWD"] = "/".join(env["PWD"].split("/")[-3:])  # the cell's own work folder: NODE/CELL/work
        env["TMPDIR"] = "/".join(env["TMPDIR"].split("/")[-3:])  # and its own TMPDIR: NODE/CELL/.farm-tmp
        seen[runner] = env
    assert seen["auto"] == seen["shell"] == seen["cell"]
    assert seen["shell"]["LANG"] == "C" and "LC_CTYPE" not in seen["shell"]


@pytest.mark.usefixtures("runner")
def test_a_kernel_that_kills_its_runner_leaves_nothing_running(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """The kernel kills the process that started it (the python runner, or the shell's
    `timeout`), then lingers as `sleep 73`: the cell is no pass, and nothing of it is
    left running once the farm has its verdict (the login's shell reaps the cell when
    the runner did not end by itself). Where the python runners confine it and Landlock
    scopes signals (ABI 6, this machine's), the kill is refused and the kernel is killed
    at its timeout: still no pass, nothing left."""
    linger = own_sleep(73)  # this test's alone: another session's run of it may be mid-kernel
    run = f"kill -9 $PPID; exec {linger} || {{binary}}"  # a run names its kernel: here one never reached
    (row,) = verify(ssh_fleet, tmp_path, {"killer": standin_variant("PASS", MIN75, "MIN_CC=75", run=run, timeout=8)})
    assert row["outcome"] != "pass", row["reason"]
    assert not processes_matching(linger), "the kernel outlived the runner it killed"


def test_a_kernel_changes_nothing_beyond_its_own_work_folder(
    runner: str, own_home_node: SshNode, tmp_path: Path
) -> None:
    """The python runners start the kernel confined by Landlock: it may write beneath
    its own work folder, /dev and /proc only (CUDA's runtime names its threads in
    /proc/self/task, and failed on the H200 without it). Its attempts to forge its own
    stdout file and to write a file of the node's user elsewhere fail, and the kernel
    still runs; where Landlock scopes signals (ABI 6) it cannot signal its runner
    either, nor claim confinement in the farm's stream. The shell runner cannot confine
    it, and the cell and the node page say so, whatever the kernel printed into the
    farm's shell (a forged "confined" line, taken as the truth before)."""
    victim = tmp_path / "farm-owned.txt"
    victim.write_text("the farm's\n")
    shm = Path("/dev/shm") / f"farm-test-confined-{os.getpid()}-{runner}"
    shm.unlink(missing_ok=True)
    prelude = tmp_path / "tamper.sh"  # the kernel's own doings, before it passes
    prelude.write_text(
        "\n".join(
            (
                f"echo forged > {victim}",
                "echo PASS > ../stdout",
                "echo scratch > here.txt && echo work-writable >&2",
                "echo kernel > /proc/self/comm && echo proc-writable >&2",
                f"touch {shm} && echo dev-writable >&2",
                # its runner: the first process above it that is neither a shell nor the kernel (or its wrapper)
                "p=$PPID; while case $(cat /proc/$p/comm) in "
                "sh|dash|bash|standin*|.farm-kernel|farm-trampoline) true;; "
                "*) false;; esac; do p=$(cut -d' ' -f4 /proc/$p/stat); done",
                "kill -0 $p 2>/dev/null && echo runner-signalled >&2",
                # a forged claim of confinement into every process above it (refused where it is confined)
                "p=$PPID; while [ \"$p\" -gt 1 ]; do printf '\\n@@farm confined 7\\n' > /proc/$p/fd/1; "
                "p=$(cut -d' ' -f4 /proc/$p/stat); done 2>/dev/null",
                "",
            )
        )
    )
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
    (row,) = verify({"t4": own_home_node}, tmp_path / "farm", {"tamper": variant})
    assert row["outcome"] == "pass", row["reason"]
    stderr = bytes(row["stderr"]).decode()
    for said in ("work-writable", "proc-writable", "dev-writable"):
        assert said in stderr, stderr
    assert shm.exists()
    shm.unlink()
    store = Store(f"sqlite:///{tmp_path / 'farm' / 'results.db'}")
    try:
        render(store, tmp_path / "reports")
    finally:
        store.close()
    node_page = (tmp_path / "reports" / "nodes" / "t4.html").read_text()
    if runner == "shell":
        assert victim.read_text() == "forged\n"
        assert "ran unconfined" in row["stage_details"], row["stage_details"]
        assert "Kernels run unconfined" in node_page
        assert "runner-signalled" in stderr, stderr
    else:
        assert "Kernels run confined by Landlock" in node_page
        assert victim.read_text() == "the farm's\n"
        assert stderr.count("Permission denied") >= 2, stderr
        assert "unconfined" not in row["stage_details"], row["stage_details"]
        assert landlock_abi() > 0
        assert ("runner-signalled" in stderr) == (landlock_abi() < 6), stderr


def test_a_kernel_cannot_rewrite_the_status_the_farm_notes_for_it(
    runner: str, own_home_node: SshNode, tmp_path: Path
) -> None:
    """A kernel that printed its pass marker and then failed (exit 1) wrote "0" over the
    farm's note of its exit status (work/.farm-status, by path, in its own folder) and
    passed (a red-team finding). The notes lie beside its work folder now, opened by the
    node's python3 before the run: confined to its work folder, the kernel can write them
    by no path. The shell scripts run it unconfined, and open them by path: there it
    still can, as the README says."""
    prelude = tmp_path / "rewrite.sh"
    prelude.write_text(
        "echo 'standin: PASS'\n"
        "for f in .farm-status ../.farm-status; do rm -f $f; echo 0 > $f; done 2>/dev/null\n"
        "echo '0' > /proc/$PPID/fd/6 2>/dev/null; true\n"
    )
    variant = standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude, run="{binary}; echo done")
    (row,) = verify({"t4": own_home_node}, tmp_path / "farm", {"rewrite": variant})
    if runner == "shell":
        assert row["outcome"] == "pass", row["reason"]
    else:
        assert row["outcome"] == "fail", row["reason"]
        assert "exit 1" in row["reason"], row["reason"]


def test_a_kernel_under_the_sanitizer_is_confined_as_its_run_was(
    runner: str, own_home_node: SshNode, tmp_path: Path
) -> None:
    """The sanitize stage runs the cell's copy again under each tool: it was a shell
    script, so the python runners confined the kernel's run but not those runs, where
    it could write whatever the node's user may. Now it is confined there too (the
    tool's log is the one file outside the work folder it may write); the shell runner
    says it is not."""
    install_sanitizer(own_home_node)
    victim = tmp_path / "farm-owned.txt"
    victim.write_text("the farm's\n")
    build = f"g++ -O1 -DMODE_PASS -DMIN_CC=75 -DTAMPER_FILE='\"{victim}\"' -o {{binary}} {{sources}}"
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", build=build, sanitize=["memcheck", "racecheck"])
    (row,) = verify({"t4": own_home_node}, tmp_path / "farm", {"tamper": variant})
    assert row["outcome"] == "pass", row["reason"]
    tools = json.loads(row["sanitizer"])
    assert [(t["tool"], t["errors"], t["exit_code"]) for t in tools] == [("memcheck", 0, 0), ("racecheck", 0, 0)]
    details = json.loads(row["stage_details"])["sanitize"]["detail"]
    if runner == "shell":
        assert victim.read_text() == "forged\n"
        assert "its sanitizer runs ran unconfined" in details, details
    else:
        assert victim.read_text() == "the farm's\n"
        assert "unconfined" not in details and landlock_abi() > 0, details


def test_a_kernel_cannot_open_the_sanitizers_temporary_folder_nor_swap_its_copy_between_tools(
    runner: str, own_home_node: SshNode, tmp_path: Path
) -> None:
    """Found by review of the confined sanitize stage. (1) Its private temporary folder
    was work/.farm-tmp, made with exist_ok: a kernel whose run left a link there had
    the folder it named opened to its sanitizer runs (a write-all rule for $HOME, say),
    while the stage said confined. (2) Its copy was hashed once before the tools: under
    the first tool the kernel could swap it for a program that always passes, and the
    next tools gave that one their clean bill. Each tool now runs a fresh copy of the
    build, hashed (a swap was the node's infra-error since, retried until the node was
    marked unhealthy: a red-team finding), so the swap is undone before the next tool."""
    install_sanitizer(own_home_node)
    opened = tmp_path / "opened"
    opened.mkdir()
    planted = (
        f"g++ -O1 -DMODE_PASS -DMIN_CC=75 -DPLANT_TMP_LINK='\"{opened}\"' "
        f"-DTAMPER_FILE='\"{opened}/forged\"' -o {{binary}} {{sources}}"
    )
    swapped = "g++ -O1 -DMODE_PASS -DMIN_CC=75 -DSWAP_UNDER='\"memcheck\"' -o {binary} {sources}"
    tools = ["memcheck", "racecheck"]
    rows = verify(
        {"t4": own_home_node},
        tmp_path / "farm",
        {
            "planted": standin_variant("PASS", MIN75, "MIN_CC=75", build=planted, sanitize=tools),
            "swapped": standin_variant("PASS", MIN75, "MIN_CC=75", build=swapped, sanitize=tools),
        },
    )
    got = {row["variant"]: row for row in rows}
    assert got["swapped"]["outcome"] == "pass", got["swapped"]["reason"]
    assert [t["tool"] for t in json.loads(got["swapped"]["sanitizer"])] == tools
    planted_row = got["planted"]
    assert planted_row["outcome"] == "pass", planted_row["reason"]
    details = json.loads(planted_row["stage_details"])["sanitize"]["detail"]
    if runner == "shell":
        assert (opened / "forged").exists() and "unconfined" in details
    else:
        assert not (opened / "forged").exists(), details
        assert "unconfined" not in details, details


def test_a_kernel_gets_a_temporary_folder_of_its_own_and_not_the_nodes(
    runner: str, own_home_node: SshNode, tmp_path: Path
) -> None:
    """Programs expect to write $TMPDIR: each run gets a folder of its own there, beside its
    work folder, removed once it ends (what a kernel left in the node's /tmp stayed there
    night after night). The node's own temporary folder a confined kernel may not write by
    name (round 49: one that filled it hid its failure as the node's lack of room), whether
    the cells' folders are in it (a workdir under /tmp, as here with TMPDIR its parent) or not."""
    prelude = tmp_path / "tmp.sh"  # the kernel's own
    prelude.write_text(
        'echo x > "$TMPDIR/k.txt" && echo "tmp-writable $TMPDIR" >&2; '
        'echo x > "$FARM_NODE_TMP/direct.txt" && echo node-tmp-writable >&2; true\n'
    )
    apart = tmp_path / "scratch"
    apart.mkdir()
    for root, node_tmp in ((tmp_path / "apart", apart), (tmp_path / "inside", tmp_path / "inside")):
        (row,) = verify(
            {"t4": own_home_node},
            root,
            {"tmp": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)},
            env={"TMPDIR": str(node_tmp), "FARM_NODE_TMP": str(node_tmp)},
        )
        assert row["outcome"] == "pass", row["reason"]
        said = bytes(row["stderr"]).decode()
        own = re.search(r"^tmp-writable (\S+)$", said, re.M)
        assert own is not None, said
        assert own.group(1).startswith(str(root / "work" / "cells")) and own.group(1).endswith("/.farm-tmp"), said
        assert not Path(own.group(1)).exists() and not (node_tmp / "k.txt").exists()
        wrote = (node_tmp / "direct.txt").exists()
        assert wrote == ("node-tmp-writable" in said), said
        assert wrote == (runner == "shell"), said


@pytest.mark.usefixtures("runner")
def test_a_build_keeps_its_temporary_files_in_a_folder_of_its_own(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """nvcc keeps its intermediate files in $TMPDIR: in the node's /tmp a kernel running
    beside the build (which may write there) could rewrite them between ptxas and fatbinary,
    and the build would hold its code. The build's $TMPDIR is its own, removed once it ends."""
    build = 'echo "$TMPDIR" > {binary}.tmpdir && test -d "$TMPDIR" && g++ -O1 -DMODE_PASS -o {binary} {sources}'
    (row,) = verify(ssh_fleet, tmp_path, {"own": standin_variant("PASS", MIN75, build=build)})
    assert row["outcome"] == "pass", row["reason"]
    (said,) = (tmp_path / "work" / "builds").glob("*/*/*.tmpdir")
    folder = said.read_text().strip()
    assert folder == str(said.parent / ".farm-tmp") and not Path(folder).exists(), folder


def test_a_chain_of_leftovers_deeper_than_any_round_count_is_killed(
    runner: str, own_home_node: SshNode, tmp_path: Path
) -> None:
    """The kernel leaves a chain of 70 processes, each the parent of the next, in a
    session of their own with no environment (so no marker): the python runners'
    leftover kill took one layer of the tree a round for 64 rounds, and 7 of them
    outlived the cell (a review's reproduction; they kept its stdout open). It takes
    every descendant at once, until none is left. The shell scripts have no
    subreaper: there they live on, as the README says."""
    token = f"{os.getpid()}{time.monotonic_ns() % 100000}"
    chain = tmp_path / "chain.sh"
    # each level starts the next, the last says the chain is whole (in the cell's work folder)
    chain.write_text(
        f'n=$1; if [ "$n" -gt 0 ]; then /bin/sh {chain} $((n-1)) & else : > chain-done; fi; exec sleep 1000.{token}\n'
    )
    run = (
        f"setsid /usr/bin/env -i /bin/sh {chain} 70 </dev/null >/dev/null 2>&1 & "
        "i=0; while [ ! -e chain-done ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; {binary}"
    )
    (row,) = verify(
        {"t4": own_home_node}, tmp_path / "farm", {"chain": standin_variant("PASS", MIN75, "MIN_CC=75", run=run)}
    )
    # the chain counted where the runner's subreaper found it: no pass then (red-team 257)
    assert row["outcome"] == ("pass" if runner == "shell" else "fail"), row["reason"]
    time.sleep(0.5)
    alive = processes_matching(f"sleep 1000.{token}")
    try:
        if runner == "shell":
            assert alive, "the shell scripts were given a subreaper: update this test and the README"
        else:
            assert alive == [], f"{len(alive)} of the chain outlived the cell"
            detail = json.loads(row["stage_details"])["run"]["detail"]
            assert "71 leftover processes killed" in detail, detail
    finally:
        for pid, _ in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _in_a_child(check) -> int:
    """CHECK's return (0-255) as the exit status of a forked process: a subreaper of
    its own, with none of pytest's children (the test nodes' sshds)."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = check()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_the_leftover_kill_reads_no_process_table_where_the_cell_left_no_child() -> None:
    """Under the GPU's lock, after each run, the runner looked for leftovers by reading
    every process's /proc/PID/stat (2.5 ms a run on a busy 2-core node). A process
    with no child has no descendant (what outlives its parent becomes the subreaper's
    child): it collects its ended children and reads nothing more. One live child
    that left a grandchild behind still has both found and killed."""

    def nothing_left() -> int:
        noderunner.subreaper()
        ended = os.fork()
        if ended == 0:
            os._exit(0)
        time.sleep(0.2)  # a zombie: collected, not counted
        listed: list[str] = []
        real = os.listdir
        os.listdir = lambda path=".": listed.append(path) or real(path)  # type: ignore[assignment]
        try:
            killed = noderunner.kill_orphans()
        finally:
            os.listdir = real  # type: ignore[assignment]
        return 0 if killed == 0 and not listed else 1

    def two_left() -> int:
        noderunner.subreaper()
        child = os.fork()
        if child == 0:  # a daemon: its own child outlives it, in a session of its own
            if os.fork() == 0:
                os.setsid()
                time.sleep(60)
                os._exit(0)
            time.sleep(60)
            os._exit(0)
        time.sleep(0.3)
        killed = noderunner.kill_orphans()
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return killed
        return 100 + killed

    assert _in_a_child(nothing_left) == 0
    assert _in_a_child(two_left) == 2


def test_the_probes_compiled_runner_is_loaded_only_by_a_python3_of_its_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe's python3 compiles the runner once per node (a cell's python3 then
    need not: a quarter of the node's CPU per cell); a python3 of another version
    (upgraded since the probe) compiles the source sent beside the code instead,
    never loads bytecode that is not its own."""
    monkeypatch.setattr(commands, "RUNNER_SOURCE", b"import sys; sys.stdout.write('from the source')")
    code = marshal.dumps(compile("import sys; sys.stdout.write('from the code')", "farm-runner", "exec"))
    python = sys.executable
    said = subprocess.run([python, "-I", "-S", "-c", "print(repr(__import__('sys').version))"], capture_output=True)
    version = ast.literal_eval(said.stdout.decode())
    for given, expected in ((version, "from the code"), (version + " (another build)", "from the source")):
        command, stdin = commands.runner_command(python, given, code)
        out = subprocess.run(["sh", "-c", command], input=stdin + b"the plan", capture_output=True, check=True)
        assert out.stdout.decode() == expected, (given, out)
    command, stdin = commands.runner_command(python)  # no compiled runner (runner: shell's probe)
    assert subprocess.run(["sh", "-c", command], input=stdin, capture_output=True).stdout == b"from the source"


def test_the_probe_brings_back_the_runner_compiled_by_the_nodes_python3(own_home_node: SshNode, tmp_path: Path) -> None:
    with transport_for("t4", NodeSpec(**own_home_node.farm_entry(tmp_path / "work"))) as transport:
        snapshot = probe(transport)
        version = transport.run("python3 -I -S -c 'import sys; print(repr(sys.version))'", timeout=30).stdout
    assert snapshot.python_version == ast.literal_eval(version)
    code = marshal.loads(snapshot.runner_code)
    assert code.co_filename == "farm-runner" and "reap" in code.co_names


# what both probes must say alike (the resident one also says it serves the cells)
PROBED = (
    "workdir", "hostname", "os", "gpu_name", "cc", "driver", "memory", "gpu_count", "nvcc_path", "nvcc_version",
    "nvcc_output", "smi_output", "driver_evidence", "gpus", "driver_check", "flock", "python", "gpu_indexes",
    "folder_digests", "compilers",
)  # fmt: skip


def both_probes(node: SshNode, work: Path, folders: list[str]) -> tuple[object, object]:
    """(the shell probe's snapshot, the resident runner's), of one node."""
    with transport_for("t4", NodeSpec(**node.farm_entry(work))) as transport:
        shell = probe(transport, folders)
        runner = resident.ResidentRunner(transport.sibling(), "python3", Transport.open)
        try:
            served = resident_probe(runner, transport.node, folders)
        finally:
            runner.close()
    return shell, served


def test_the_resident_runners_probe_says_what_the_shell_probe_says(own_home_node: SshNode, tmp_path: Path) -> None:
    """The node's resident runner answers the probe where it can start (runner: auto),
    the shell probe elsewhere: both must see the same node, its cards, nvcc, python3
    and the digests of the folders staging asks about (one there, one missing, one
    given by its absolute path)."""
    work = tmp_path / "work"
    tree = work / "deps" / "cutlass"
    (tree / "include").mkdir(parents=True)
    (tree / "include" / "gemm.h").write_text("#pragma once\n")
    (tree / "sp ace.txt").write_text("a name with a space\n")
    os.symlink("include/gemm.h", tree / "link")
    folders = ["deps/cutlass", "deps/missing", str(tree)]
    shell, served = both_probes(own_home_node, work, folders)
    assert {k: getattr(served, k) for k in PROBED} == {k: getattr(shell, k) for k in PROBED}
    assert served.folder_digests["deps/cutlass"] == served.folder_digests[str(tree)] == shell_digest(tree)
    assert served.folder_digests["deps/missing"] == ""
    assert served.gpus and served.gpus[0].name == "Tesla T4" and served.nvcc_version
    gcc = os.path.realpath(shutil.which("gcc") or "gcc")
    assert f"gcc {gcc} {os.stat(gcc).st_size} " in served.compilers, served.compilers
    assert (served.resident, shell.resident) == (True, False)
    assert (work / "incoming").is_dir()


def test_the_resident_probe_places_the_small_bundles_sent_with_it(
    own_home_node: SshNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold node's staging cost a round trip of its own (50 ms away: 58 ms): the
    kernel's sources now go with the resident probe, which puts them in place where
    they are not there intact, and staging ships nothing more. A copy there intact is
    left alone; an altered one is replaced, and staging still says it was altered."""
    src = tmp_path / "src"
    (src / "include").mkdir(parents=True)
    (src / "k.cu").write_text("__global__ void k() {}\n")
    (src / "include" / "k.h").write_text("#pragma once\n")
    made = bundle.Bundle.of_files("sources of k", {"k.cu": src / "k.cu", "include/k.h": src / "include" / "k.h"})
    needs = bundle.Needs(sources={"k": made}, shipped={}, own={})
    folder = f"bundles/{made.digest}"

    def not_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("staged in a round trip of its own")

    monkeypatch.setattr(staging, "place", not_again)

    def shipped(transport: object, workdir: str, bundles: list, cache: Path, runner: object) -> tuple[int, str]:
        return (0, "") if all(found == b.digest for b, found in bundles) else not_again()

    monkeypatch.setattr(staging, "ship", shipped)
    work = tmp_path / "work"
    placed_at = work / folder

    def probe_and_stage() -> tuple[object, staging.Staging]:
        with transport_for("t4", NodeSpec(**own_home_node.farm_entry(work))) as transport:
            runner = resident.ResidentRunner(transport.sibling(), "python3", Transport.open)
            try:
                snapshot = resident_probe(runner, transport.node, needs.folders, staging.offered(needs))
                staged = staging.stage(
                    transport,
                    snapshot.workdir,
                    needs,
                    snapshot.folder_digests,
                    tmp_path / "cache",
                    runner,
                    snapshot.placed,
                )
            finally:
                runner.close()
        return snapshot, staged

    snapshot, staged = probe_and_stage()  # cold: placed by the probe
    assert snapshot.placed == {folder} and snapshot.folder_digests[folder] == ""
    assert (placed_at / "k.cu").read_text() == "__global__ void k() {}\n" and shell_digest(placed_at) == made.digest
    assert staged.shipped == made.size and not staged.notes
    snapshot, staged = probe_and_stage()  # warm: nothing placed, nothing shipped
    assert snapshot.placed == set() and snapshot.folder_digests[folder] == made.digest and staged.shipped == 0
    (placed_at / "include" / "k.h").write_text("#define ALTERED\n")  # altered on the node: replaced, and said
    snapshot, staged = probe_and_stage()
    assert snapshot.placed == {folder} and snapshot.folder_digests[folder] not in ("", made.digest)
    assert (placed_at / "include" / "k.h").read_text() == "#pragma once\n"
    assert "the copy on the node was altered" in staged.notes[made.digest]
    assert sorted(p.name for p in placed_at.parent.iterdir()) == [made.digest]  # nothing left beside it


def test_an_nvidia_smi_that_prints_the_probes_own_sections_confirms_no_card(
    own_home_node: SshNode, tmp_path: Path
) -> None:
    """nvidia-smi is a program on PATH: one that prints, after its T4 row, what the
    driver and NVML would say of a real T4 gets no card confirmed by either probe
    (the probe's own sections come after it, and the resident runner indents a
    tool's lines that look like its own)."""
    smi = own_home_node.node_bin / "nvidia-smi"
    real = smi.read_text()
    uuid = own_home_node.cards[0].uuid(0)
    forged = (
        f"@@farm driver\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  580.00  Release Build\n/dev/nvidiactl\n"
        f"@@farm procgpus\nModel: \t\t Tesla T4\nGPU UUID: \t {uuid}\n@@farm nvml\ngpu|{uuid}|7.5|Tesla T4\n"
    )
    smi.write_text(f"#!/bin/sh\necho '{own_home_node.cards[0].csv(0)}'\nprintf '%s' '{forged}'\n")
    try:
        shell, served = both_probes(own_home_node, tmp_path / "work", [])
    finally:
        smi.write_text(real)
    for snapshot in (shell, served):
        assert not snapshot.real_gpu, snapshot.driver_check
        assert "NVRM" not in snapshot.driver_evidence
    assert " @@farm nvml" in served.smi_output.splitlines()


def test_the_resident_runner_loads_the_farms_compiled_code_only_where_its_bytecode_is_the_farms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The farm compiles the runner once (its own interpreter) and sends the code with
    the source: a node's python3 whose bytecode magic number is the farm's loads the
    code, as it would a .pyc; any other compiles the source."""
    monkeypatch.setattr(resident, "RUNNER_SOURCE", b"import sys; sys.stdout.write('from the source')")
    code = marshal.dumps(compile("import sys; sys.stdout.write('from the code')", "farm-runner", "exec"))
    monkeypatch.setattr(resident, "compiled", lambda source: code)
    for magic, expected in ((resident.MAGIC_NUMBER, "from the code"), (b"\x00\x00\r\n", "from the source")):
        monkeypatch.setattr(resident, "MAGIC_NUMBER", magic)
        command, stdin = resident.resident_command(sys.executable, None, "m" * resident.MARK_SIZE)
        out = subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, check=True)
        assert out.stdout.decode() == expected, (magic, out)


def test_a_kernel_cannot_write_the_farms_own_files_through_the_temporary_folder(
    ssh_fleet: Fleet, tmp_path: Path
) -> None:
    """A confined kernel may write the temporary folder where the cells' folders are not in
    it. With the node's work folder elsewhere and the farm's own folder (its database, journal,
    reports) under /tmp, as a clone in /tmp has it, a kernel rewrote stored verdicts there
    (found by a red-team helper). The farm's files are named to the node now: such a folder
    stays closed."""
    work = Path.home() / ".cache" / f"farm-test-guard-{os.getpid()}"
    forged = tmp_path / "farm" / "forged.txt"
    prelude = tmp_path / "forge.sh"  # the kernel's own
    prelude.write_text(f"echo forged > {forged}\n")
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
    try:
        config = write_farm(
            tmp_path / "farm", {"t4": ssh_fleet["t4"].farm_entry(work)}, [standin_job("standin", {"v": variant})]
        )
        farm = load_farm(config)
        store = Store(farm.database_url)
        try:
            summary = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "cache")
        finally:
            store.close()
        (row,) = query(tmp_path / "farm" / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert row["outcome"] == "pass", row["reason"]
    assert not forged.exists()
    assert "Permission denied" in bytes(row["stderr"]).decode(), bytes(row["stderr"])


def test_the_farms_files_close_a_temporary_folder_only_where_they_are(tmp_path: Path) -> None:
    """The farm names its own files to every node; a remote node has none of them, and its
    /tmp stayed closed to its kernels for a farm checked out under /tmp (a review's)."""
    from orchestrator.run import noderunner

    cell = "/nonexistent-workdir/cells/1-t/n/k+v"
    here = str(tmp_path / "farm")
    assert noderunner.scratch({"TMPDIR": str(tmp_path)}, cell, (str(tmp_path / "elsewhere"),)) == (str(tmp_path),)
    Path(here).mkdir()
    assert noderunner.scratch({"TMPDIR": str(tmp_path)}, cell, (here,)) == ()


@pytest.mark.usefixtures("runner")
def test_a_card_lost_during_the_run_is_the_nodes_fault(tmp_path: Path) -> None:
    """Found by a red-team helper: a GPU that fell off the bus after the probe (from then on
    nvidia-smi says "No devices were found") failed the kernel that could not find it. A run
    that fails has its card asked after it, as its disk's room is: gone, it is infra-error."""
    fleet = Fleet(tmp_path / "fleet")
    node = fleet.add("t4", CARDS["t4"], start=False)
    lose_card_after_probe(node.node_bin, tmp_path / "probed")
    node.start()
    try:
        (row,) = verify({"t4": node}, tmp_path / "farm", {"pass": standin_variant("PASS", MIN75, "MIN_CC=75")})
    finally:
        fleet.stop()
    assert (row["outcome"], row["failed_stage"]) == ("infra-error", "run"), row["reason"]
    assert "the node lost the cell's GPU during its run" in row["reason"], row["reason"]
    assert "No devices were found" in row["reason"]


def test_two_cards_with_one_uuid_are_no_cards_to_pin_a_cell_to(tmp_path: Path) -> None:
    """Found by a red-team helper: nvidia-smi listing a T4 and an H100 under one UUID had the
    H100's cells pinned (CUDA_VISIBLE_DEVICES=UUID) to whichever card that named, and judged
    there. The node is unusable: infra-error, naming the UUID."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Twin(Card):
        def uuid(self, index: int) -> str:
            return "GPU-11111111-2222-3333-4444-555555555555"

    fleet = Fleet(tmp_path / "fleet")
    node = fleet.add("t4", [Twin("Tesla T4", "7.5"), Twin("NVIDIA H100 80GB HBM3", "9.0", memory="81559 MiB")])
    try:
        rows = verify({"t4": node}, tmp_path / "farm", {"min75": standin_variant("PASS", MIN75, "MIN_CC=75")})
    finally:
        fleet.stop()
    assert {row["outcome"] for row in rows} == {"infra-error"}, [row["reason"] for row in rows]
    assert "lists UUID GPU-11111111-2222-3333-4444-555555555555 for more than one GPU" in rows[0]["reason"]


def _checked(script: str, folder: Path) -> dict:
    """What a check script of the runner's parts prints last (a dict), run in a python3 of its
    own in FOLDER (its sockets, threads and Landlock rules stay out of the test's process)."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        env=farm_env(),  # this checkout's orchestrator, whatever the cwd
    )
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


SCOPE_CHECK = """
import ctypes, os, sys, threading, _socket as S
from orchestrator.run import noderunner as n
from orchestrator.run.noderunner import KernelFiles
libc = ctypes.CDLL(None, use_errno=True)
files = KernelFiles(1, 1, 1)
said, ready, done = {}, threading.Event(), threading.Event()

def confined(then):
    rules, why = n.ruleset((os.getcwd(),), own_sockets=True)
    assert rules, why
    assert libc.prctl(38, 1, 0, 0, 0) == 0 and libc.syscall(n.SYS_RESTRICT, ctypes.c_int(rules[0]), 0) == 0
    then()

def attempt(who):
    client = S.socket(S.AF_UNIX, S.SOCK_SEQPACKET)
    try:
        client.connect(b"\\0" + files.name.encode())
        said[who] = "connected"
    except OSError as err:
        said[who] = err.strerror

def run():  # the run's own tree: the listener bound there, as guarded() binds it
    assert files.listen()
    attempt("its own run")
    ready.set()
    done.wait()

def other():  # another cell's kernel: a confined tree of its own
    ready.wait()
    attempt("another cell")
    done.set()

threads = [threading.Thread(target=confined, args=(f,)) for f in (run, other)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(said)
"""


def test_only_its_own_run_reaches_the_socket_a_runner_hands_the_kernels_files_on(tmp_path: Path) -> None:
    """The runner binds the socket its trampolines ask for the kernel's files on from the thread
    that starts the run, once confined, and scopes the run's abstract unix sockets to its own tree
    (Landlock ABI 6): another cell's kernel, confined in a tree of its own, cannot connect to it,
    so it cannot crowd out that run's requests (64 idle connections made a passing kernel's run
    fail, "never started": a red-team finding). Below ABI 6 nothing scopes them."""
    said = _checked(SCOPE_CHECK, tmp_path)
    assert said["its own run"] == "connected", said
    assert said["another cell"] == ("Operation not permitted" if landlock_abi() >= 6 else "connected"), said


OWN_CHECK = """
import os, select, subprocess, sys, _socket as S
from orchestrator.run.noderunner import KernelFiles
files = KernelFiles(1, 1, 1)
assert files.listen()
poller = select.poll()
address = b"\\0" + files.name.encode()
stranger = subprocess.Popen(["sleep", "30"])  # a process that is not this one's ancestor

files.poller = poller

def served(shell, connect):
    files.shell = shell
    before = len(files.conns)
    connect()
    files.accept()
    return len(files.conns) - before

clients = []
def from_here():
    client = S.socket(S.AF_UNIX, S.SOCK_SEQPACKET)
    client.connect(address)
    clients.append(client)

def from_child():
    code = f"import _socket as S, time; s = S.socket(S.AF_UNIX, 5); s.connect({address!r}); time.sleep(5)"
    clients.append(subprocess.Popen([sys.executable, "-c", code]))
    waiting = select.poll()
    waiting.register(files.listener.fileno(), select.POLLIN)
    assert waiting.poll(30000), "the child never connected"

print({
    "its own shell": served(os.getpid(), from_here),
    "a descendant": served(os.getpid(), from_child),
    "another tree": served(stranger.pid, from_here),
})
stranger.kill()
"""


def test_the_runner_serves_only_its_own_runs_processes(tmp_path: Path) -> None:
    """A request to start a kernel command counts only from a descendant of the run's shell
    (SO_PEERCRED): where Landlock does not scope the socket (ABI 5 and older, an unconfined
    process), another cell's kernel connected and sent a request that was none of the run's,
    and the victim cell was judged fail (a red-team finding). Connections from elsewhere are
    closed, neither served nor counted."""
    said = _checked(OWN_CHECK, tmp_path)
    assert said == {"its own shell": 1, "a descendant": 1, "another tree": 0}, said


GONE_CHECK = """
import os, select, subprocess, sys
from orchestrator.run.noderunner import KernelFiles
os.mkdir("bin")
copy = os.path.abspath("bin/k")
with open(copy, "w") as kernel:
    kernel.write("#!/bin/sh\\necho ran > ran.txt\\n")
os.chmod(copy, 0o755)
status = os.open("status", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC)
files = KernelFiles(status, 1, 2, [[["binary", ""]]], copy, {"PATH": os.environ["PATH"]})
assert files.listen()
files.poller = select.poll()
files.shell = os.getpid()
address = b"\\0" + files.name.encode()
ask = b"run\\0" + b"1\\0" + copy.encode()
code = f"import _socket as S; s = S.socket(S.AF_UNIX, 5); s.connect({address!r}); s.send({ask!r})"
subprocess.run([sys.executable, "-c", code], check=True)  # asks, and is gone
fd = files.listener._accept()
fd = fd[0] if isinstance(fd, tuple) else fd
import _socket
files.conns[fd] = [_socket.socket(fileno=fd), None]  # taken as ours before it went (the race)
files.read(fd)
files.close()
print({"started": len(files.kernels), "ran": os.path.exists("ran.txt"), "forged": files.forged})
"""


def test_a_request_whose_asker_is_gone_starts_no_kernel(tmp_path: Path) -> None:
    """The kernel a request asks for gets its asker's limits, the run's `ulimit -f` among them
    (the farm's size limit on every file the kernel writes): where the asker is gone before its
    limits are read, none is started (it would write without the limit), and nothing is noted."""
    said = _checked(GONE_CHECK, tmp_path)
    assert said == {"started": 0, "ran": False, "forged": 0}, said
    assert (tmp_path / "status").read_bytes() == b""


def test_a_request_gets_the_nodes_own_loader_and_launcher_settings(tmp_path: Path) -> None:
    """A kernel command the runner starts for a request keeps the request's variables (what the
    run exported), but for the code its process loads, what steers its launchers and PATH, which
    are the node's whatever the request says (LD_PRELOAD naming a library of the run's that printed
    the marker passed a failing kernel: a red-team finding); a launcher's word the shell filled
    in may not name them either (`mpirun -x "$V"`)."""
    (tmp_path / "bin").mkdir()
    copy = str(tmp_path / "bin" / "k")
    Path(copy).write_text("#!/bin/sh\n")
    Path(copy).chmod(0o755)
    files = noderunner.KernelFiles(
        1, 1, 2, [[["binary", ""]], [["launcher", "mpirun"], ["word", "-x"], ["prefix", ""], ["binary", ""]]],
        copy, {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": "/opt/node/lib", "FARM_CELL": "c1"}, ("FARM_CELL",),
        None, ["FOO", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "LANGUAGE", "TIME", "VALGRIND_OPTS"],
    )  # fmt: skip
    sent = {
        "FOO": "1",
        "LD_PRELOAD": "/tmp/marker.so",
        "LD_LIBRARY_PATH": "/tmp",
        "CUDA_INJECTION64_PATH": "/tmp/x.so",
        "VALGRIND_OPTS": "--log-fd=1",
        "VALGRIND_LIB": "/tmp/fake-tools",  # valgrind's tool, of the run's making (a red-team finding)
        "LANGUAGE": "../../../../tmp/m",  # a launcher's messages from a catalog of the run's (a red-team finding)
        "LOCPATH": "/tmp/locales",
        "TIME": "standin: PASS",
        "OMPI_MCA_plm": "x",
        "FARM_CELL": "other",
        "PATH": "/tmp/fake-bin:/usr/bin",  # a fake nvidia-smi the kernel would start (a red-team finding)
    }
    environ = b"".join(f"{key}={value}\0".encode() for key, value in sent.items())
    argv, env, note = files.request(b"run\0" + b"1\0" + copy.encode() + b"\0" + environ)
    assert argv == [copy] and note is None
    node_path = os.environ["PATH"].encode()
    assert env == {b"FOO": b"1", b"LD_LIBRARY_PATH": b"/opt/node/lib", b"FARM_CELL": b"c1", b"PATH": node_path}, env
    mpirun = shutil.which("mpirun")
    if mpirun is None:  # the launcher's word is read before its lookup: any name will do for the refusal
        files.calls[1][0][1] = "env"
        mpirun = "env"
    asked = [mpirun.rsplit("/", 1)[-1] if "/" in mpirun else mpirun, "-x", "LD_PRELOAD=/tmp/marker.so", copy]
    assert files.request(b"\0".join([b"run", b"4", *(w.encode() for w in asked)]) + b"\0") is None


def test_a_kernel_the_runner_starts_gets_of_a_requests_variables_only_those_the_run_names(tmp_path: Path) -> None:
    """Of a request's environment, the kernel gets the variables whose names the run's text
    holds (config/kernel_calls.py run_names: set, or unset) and the shell's PWD; the rest as the
    run's shell started. A sourced script's BASH_ENV (read by a launcher that is a bash script)
    or an MPI launcher's settings never reach it: a denylist of such names missed one after
    another (red-team findings)."""
    (tmp_path / "bin").mkdir()
    copy = str(tmp_path / "bin" / "k")
    Path(copy).write_text("#!/bin/sh\n")
    Path(copy).chmod(0o755)
    run = "export OMP_NUM_THREADS=4; unset GONE; . ./env.sh && cd sub && {binary}"
    names = kernel_calls.run_names(run)
    assert {"OMP_NUM_THREADS", "GONE", "env", "sh", "sub", "binary"} <= set(names)
    started = {"PATH": os.environ["PATH"], "HOME": "/home/n", "GONE": "node's", "KEPT": "node's", "FARM_CELL": "c1"}
    calls = kernel_calls.kernel_call_words(run)
    files = noderunner.KernelFiles(1, 1, 2, calls, copy, started, ("FARM_CELL",), None, names)
    sent = {
        "OMP_NUM_THREADS": "4",
        "BASH_ENV": str(tmp_path / "evil.sh"),
        "HYDRA_LAUNCHER_EXEC": str(tmp_path / "fake"),
        "KEPT": "the sourced script's",
        "PWD": str(tmp_path / "sub"),
        "PATH": "/tmp/fake-bin",
        "FARM_CELL": "other",
    }
    environ = b"".join(f"{key}={value}\0".encode() for key, value in sent.items())
    argv, env, note = files.request(b"run\0" + b"1\0" + copy.encode() + b"\0" + environ)
    assert argv == [copy] and note is None
    assert env == {
        b"PATH": os.environ["PATH"].encode(),
        b"HOME": b"/home/n",
        b"KEPT": b"node's",
        b"FARM_CELL": b"c1",
        b"OMP_NUM_THREADS": b"4",
        b"PWD": str(tmp_path / "sub").encode(),
    }, env
