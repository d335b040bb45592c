"""Review of rounds 162-164 (helper review165).

1. The sanitize stage took whichever GPU of the cell's model was least queued when the run ended,
   not the card the run was pinned to: a cell run on GPU 1 was sanitized on GPU 0, and its record
   named GPU 1 only. The sanitizer now runs on the cell's own card (GpuSlots.acquire's `gpu`).
2. removal.remove_sh gave taken owner bits back by `chmod -R`, which follows a link named on its
   command line: a kernel's TMPDIR made a link (its parent 555) had the farm make the node user's
   files there u+rwx. Now find, following no link, chmods only the folders that lack the bits.
3. ended_sh and GROUP_SH read /proc with `< file 2>/dev/null`: the shell's "cannot open" for each
   pid already gone went into the stage's stderr. The redirections are now the other way round.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, install_sanitizer, query, standin_job, standin_variant
from test_verdicts import MIN75, run

from orchestrator.run.commands import GROUP_SH
from orchestrator.run.removal import remove_sh
from orchestrator.run.slots import GpuSlots, MachineQueues
from orchestrator.run.snapshot import Gpu
from orchestrator.transport.base import ended_sh

T4 = CARDS["t4"]


def _gpus() -> tuple[Gpu, Gpu]:
    return Gpu(0, T4.uuid(0), T4.name, T4.cc, T4.memory), Gpu(1, T4.uuid(1), T4.name, T4.cc, T4.memory)


def test_the_sanitizer_runs_on_the_card_the_cells_run_was_pinned_to(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """Two T4s, two cells each sanitized with memcheck. The cell on GPU 1 runs 2 s longer; the other
    cell's run and sanitize on GPU 0 are done by then, so GPU 0 has nothing queued and GPU 1's own
    sanitizer run went there (the least queued, first by index): a verdict of a card the run never saw."""
    node = ssh_fleet.add(f"sani-{tmp_path.name[-12:]}", [T4, T4])
    install_sanitizer(node)
    second = node.cards[1].uuid(1)
    variants, logs = {}, {}
    for name in ("a", "b"):
        log = Path("/dev/shm") / f"review165-{tmp_path.name}-{name}.log"  # a confined kernel writes /dev
        logs[name] = log
        prelude = tmp_path / f"{name}.sh"
        prelude.write_text(
            f'echo "${{STANDIN_SANITIZER_TOOL:-run}} $CUDA_VISIBLE_DEVICES" >> {log}\n'
            f'[ -n "${{STANDIN_SANITIZER_TOOL-}}" ] || [ "$CUDA_VISIBLE_DEVICES" != {second} ] || sleep 2\n'
        )
        variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
        variant["sanitize"] = ["memcheck"]
        variants[name] = variant
    entry = node.farm_entry(tmp_path / "work", build_jobs=2)
    config = make_farm(tmp_path / "farm", {"duo": entry}, [standin_job("standin", variants)])
    try:
        _, summary = run(config)
        said = {name: log.read_text().split("\n") for name, log in logs.items()}
    finally:
        for log in logs.values():
            log.unlink(missing_ok=True)
    found = query(tmp_path / "farm" / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    assert sorted(r["gpu_uuid"] for r in found) == sorted(c.uuid(i) for i, c in enumerate(node.cards))
    for row in found:
        assert row["outcome"] == "pass", (row["variant"], row["reason"])
        seen = {line.split()[1] for line in said[row["variant"]] if line}
        assert seen == {row["gpu_uuid"]}, (row["variant"], said)


def test_a_slot_asked_for_one_gpu_waits_for_that_gpu() -> None:
    """The farm's own pool (no flock on the node): the sanitizer's slot of the card its run had waits for
    that card, though another is free; counted on the node (flock), it queues on that card's lock."""
    gpu0, gpu1 = _gpus()
    pool = GpuSlots([gpu0, gpu1]).on(MachineQueues())
    assert pool.acquire(30)[0] == gpu0
    got: list[Gpu | None] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(30, gpu0)[0]))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not got  # GPU 1 is free, but it is not the cell's card
    pool.release(gpu0, 30)
    waiter.join(5)
    assert got == [gpu0]
    on_node = GpuSlots([gpu0, gpu1], on_node=True).on(MachineQueues())
    assert on_node.acquire(10, gpu1) == (gpu1, 0.0)
    assert on_node.acquire(10, gpu1) == (gpu1, 10.0)  # queued behind the first on its own card


def test_the_shell_removal_never_changes_modes_through_a_link(tmp_path: Path) -> None:
    """remove_sh gives the owner's bits back with `chmod -R` where rm left something, and chmod follows a
    link named on its command line: a kernel that made its folder's TMPDIR a link to another folder of
    the node's user, and its folder 555 (so rm could not unlink the link), had the farm make every file
    there u+rwx (the farm's placed inputs, kept unwritable, among them). Only real folders are given bits."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.fail("this test removes as a user of its own: it needs root and setpriv")
    root = Path(tempfile.mkdtemp(prefix="review165-"))
    try:
        outside, cell = root / "outside", root / "cell"
        outside.mkdir()
        (outside / "kept").write_text("x")
        (outside / "kept").chmod(0o400)
        cell.mkdir()
        (cell / "tmp").symlink_to(outside)
        taken = root / "work" / "junk"  # a folder whose taken bits are nested: 000 under 000
        (taken / "deep").mkdir(parents=True)
        (taken / "deep" / "f").write_text("x")
        subprocess.run(["chown", "-hR", "65534:65534", str(root)], check=True)
        (taken / "deep").chmod(0)
        taken.chmod(0)
        cell.chmod(0o555)
        words = " ".join(shlex.quote(str(p)) for p in (cell / "tmp", taken))
        script = f"for w in {words}; do {remove_sh('$w')}; done; true"
        subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script], check=True)
        assert stat.S_IMODE((outside / "kept").stat().st_mode) == 0o400
        assert not taken.exists()  # a real folder's taken bits are given back, and it goes
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def test_the_kill_waits_say_nothing_on_stderr_of_processes_already_gone() -> None:
    """ended_sh reads each killed pid's /proc/PID/stat, and GROUP_SH every process's: a process that
    ended before its read (the common case: SIGKILL is quick) had dash, busybox sh and bash each print
    "cannot open /proc/N/stat" into the stage's stderr, since `< file` is opened before `2>/dev/null`."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid is no process now
    for shell in ("dash", "busybox sh", "bash"):
        script = f"pid={gone.pid}; {ended_sh(str(gone.pid))}{GROUP_SH}echo done"
        ran = subprocess.run([*shell.split(), "-c", script], capture_output=True, text=True, timeout=30)
        assert (ran.stdout, ran.stderr) == ("done\n", ""), (shell, ran.stdout, ran.stderr)
