"""Small pure parts of the stages: which code a card runs, instruction counting."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.config.capability import ComputeCapability
from orchestrator.run.commands import KERNEL_FILES, kernel_files, kernel_run, kernel_statuses, other_output
from orchestrator.run.machine_code import code_path_for, count_instructions


def toy_run(tmp_path, monkeypatch, source=None, broken=None, job=lambda text: text, farm_yaml=lambda text: text):
    """The toy farm (tests/toyfarm.py) on a stand-in T4, its job's and farm.yaml's text
    changed by `job` and `farm_yaml`, run once through run_cells: the summary."""
    from nodes import CARDS, nvidia_smi_script, smi_on_path
    from toyfarm import TOY_SOURCE, toy_farm

    from orchestrator.config import load_farm
    from orchestrator.plan import plan_cells
    from orchestrator.run import run_cells
    from orchestrator.store import Store

    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = tmp_path / "farm" / "farm.yaml"
    if not config.exists():
        toy_farm(tmp_path / "farm", source=source or TOY_SOURCE, broken=broken)
    job_file = tmp_path / "farm" / "jobs" / "toy.yaml"
    job_file.write_text(job(job_file.read_text()))
    config.write_text(farm_yaml(config.read_text()))
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        return run_cells(farm, store, plan_cells(farm, None, None))
    finally:
        store.close()


@pytest.mark.parametrize(
    ("cc", "elf", "ptx", "expected"),
    [
        ("9.0", ["sm_90a"], [], "native"),  # wgmma's gencode build on Hopper
        ("10.0", ["sm_90a"], [], "no-code"),  # arch-specific cubins run on their CC only
        ("9.0", ["sm_80"], ["sm_80"], "ptx-jit"),  # cutlass sm80 on the H200: PTX compiled at load
        ("9.0", ["sm_75"], ["sm_75"], "ptx-jit"),
        ("8.0", ["sm_80"], ["sm_80"], "native"),
        ("8.6", ["sm_80"], ["sm_80"], "native"),  # same major, newer minor: the cubin loads
        ("7.5", ["sm_80"], ["sm_80"], "no-code"),  # PTX for a newer arch cannot be compiled down
        ("9.0", [], ["sm_90a"], "ptx-jit"),  # arch-specific PTX is compiled for its own CC: no false red
        ("10.0", [], ["sm_90a"], "no-code"),
    ],
)
def test_code_path(cc, elf, ptx, expected):
    assert code_path_for(ComputeCapability.parse(cc), elf, ptx) == expected


def test_no_gpu_has_no_code_path():
    assert code_path_for(None, ["sm_80"], []) is None


def test_instruction_counting_is_by_whole_mnemonic():
    sass = "  HMMA.16816.F32 R4, R8, R12, R4 ;\n  HGMMA.64x64x16.F32 ...\n  LDGSTS.E.BYPASS [R1] ;\n  HMMA.1688 ...\n"
    assert count_instructions(sass, ["HMMA", "HGMMA", "LDGSTS", "IMMA"]) == {
        "HMMA": 2,
        "HGMMA": 1,
        "LDGSTS": 1,
        "IMMA": 0,
    }


def test_a_bug_on_one_node_stays_with_that_node(tmp_path, monkeypatch, capsys):
    """An exception no stage expects (a bug in the farm) once aborted the whole
    run; now it stays with its node: that node's cells are infra-error naming the
    internal error, the other node's cells finish, and the run exits 70."""
    from nodes import query, standin_job, standin_variant, write_farm

    from orchestrator.config.farm import load_farm
    from orchestrator.errors import EXIT_INTERNAL
    from orchestrator.plan import plan_cells
    from orchestrator.run.scheduler import run_cells
    from orchestrator.run.stages import CellPipeline
    from orchestrator.store.database import Store

    nodes = {
        name: {"transport": "local", "workdir": str(tmp_path / f"work-{name}"), "nvcc": "/usr/local/bin/nvcc"}
        for name in ("good", "buggy")
    }
    config = write_farm(tmp_path, nodes, [standin_job("standin", {"min75": standin_variant("PASS", {"min": "7.5"})})])
    real_inspect = CellPipeline._inspect

    def inspect(self):
        if self.t.name == "buggy":
            raise TypeError("a bug planted by the test")
        return real_inspect(self)

    monkeypatch.setattr(CellPipeline, "_inspect", inspect)
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm, None), cache_dir=tmp_path / "archives")
    finally:
        store.close()
    assert summary.exit_code == EXIT_INTERNAL
    rows = {r["node"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    assert rows["good"]["outcome"] == "compile-only", rows["good"]["reason"]
    assert rows["buggy"]["outcome"] == "infra-error"
    assert "internal error in the farm (TypeError: a bug planted by the test)" in rows["buggy"]["reason"]
    (run,) = query(tmp_path / "results.db", "SELECT status, exit_code FROM runs")
    assert (run["status"], run["exit_code"]) == ("finished", EXIT_INTERNAL)
    assert "TypeError: a bug planted by the test" in capsys.readouterr().err


def test_a_bug_on_one_card_of_a_node_leaves_no_planned_cell_unstored(tmp_path, monkeypatch, capsys):
    """Found by a red-team helper: on a node with a T4 and an H100, a bug in the farm at
    the H100's cell, after the T4's cell of the same variant was stored, left the H100's
    cell with no result at all (the node's done cells were told by kernel and variant,
    not card), and JUnit said the run was complete. Each card's cell is its own."""
    from nodes import CARDS, nvidia_smi_script, query, smi_on_path, standin_job, standin_variant, write_farm

    from orchestrator.config.farm import load_farm
    from orchestrator.errors import EXIT_INTERNAL
    from orchestrator.plan import plan_cells
    from orchestrator.run.scheduler import run_cells
    from orchestrator.run.stages import CellPipeline
    from orchestrator.store.database import Store

    smi_on_path(tmp_path / "smi", nvidia_smi_script([CARDS["t4"], CARDS["h100"]]), monkeypatch)
    node = {"transport": "local", "workdir": str(tmp_path / "work"), "nvcc": "/usr/local/bin/nvcc", "build_jobs": 1}
    config = write_farm(
        tmp_path, {"two": node}, [standin_job("standin", {"min75": standin_variant("PASS", {"min": "7.5"})})]
    )
    real_inspect = CellPipeline._inspect

    def inspect(self):
        if "H100" in self.result.cell.device:
            raise TypeError("a bug planted by the test")
        return real_inspect(self)

    monkeypatch.setattr(CellPipeline, "_inspect", inspect)
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm, None), cache_dir=tmp_path / "archives")
    finally:
        store.close()
    assert summary.exit_code == EXIT_INTERNAL
    rows = {r["device"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    assert set(rows) == {CARDS["t4"].name, CARDS["h100"].name}, rows
    assert rows[CARDS["t4"].name]["outcome"] == "pass", rows[CARDS["t4"].name]["reason"]
    assert rows[CARDS["h100"].name]["outcome"] == "infra-error"
    assert "internal error in the farm (TypeError" in rows[CARDS["h100"].name]["reason"]
    assert "TypeError: a bug planted by the test" in capsys.readouterr().err


def test_a_planned_cell_the_farm_lost_is_stored_infra_and_the_run_exits_70(tmp_path, monkeypatch, capsys):
    """A cell that ends with no result stored (a bug in the farm, as the one a red-team
    helper found on a node of two cards) does not vanish: once every node ended, each
    planned cell without a result is stored infra-error saying so, and the run exits 70,
    not 0, whatever the other cells said."""
    from nodes import query, standin_job, standin_variant, write_farm

    from orchestrator.config.farm import load_farm
    from orchestrator.errors import EXIT_INTERNAL
    from orchestrator.plan import plan_cells
    from orchestrator.run.scheduler import FarmRun, run_cells
    from orchestrator.store.database import Store

    nodes = {"here": {"transport": "local", "workdir": str(tmp_path / "work"), "nvcc": "/usr/local/bin/nvcc"}}
    variants = {"a": standin_variant("PASS", {"min": "7.5"}), "b": standin_variant("PASS", {"min": "7.5"})}
    config = write_farm(tmp_path, nodes, [standin_job("standin", variants)])
    real_finish = FarmRun._finish
    dropped = []

    def finish(self, cell, *args, **kwargs):
        if cell.variant == "b" and not dropped:  # the planted bug: b's verdict is not stored
            dropped.append(cell)
            return None
        return real_finish(self, cell, *args, **kwargs)

    monkeypatch.setattr(FarmRun, "_finish", finish)
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm, None), cache_dir=tmp_path / "archives")
    finally:
        store.close()
    assert dropped and summary.exit_code == EXIT_INTERNAL
    rows = {r["variant"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    assert set(rows) == {"a", "b"}, rows
    assert rows["a"]["outcome"] == "compile-only", rows["a"]["reason"]
    assert rows["b"]["outcome"] == "infra-error"
    assert "no result was stored for this planned cell" in rows["b"]["reason"]
    # against the node's own snapshot of the run: no second probe saying the node failed (a red-team finding)
    snapshots = query(tmp_path / "results.db", "SELECT id, probe_error FROM node_snapshots")
    assert [s["probe_error"] for s in snapshots] == [None], snapshots
    assert rows["b"]["snapshot_id"] == rows["a"]["snapshot_id"] == snapshots[0]["id"]
    assert rows["b"]["device"] == rows["a"]["device"]
    (run,) = query(tmp_path / "results.db", "SELECT status, exit_code FROM runs")
    assert (run["status"], run["exit_code"]) == ("finished", EXIT_INTERNAL)


def test_a_run_that_cannot_be_stored_runs_no_cell(tmp_path):
    """The nodes connect and probe while the run is being stored; when storing it
    fails half-way (here: after its row, in the listener's run_started), no node
    stores or runs anything, the run is marked aborted, and the error is raised."""
    import pytest
    from nodes import query, standin_job, standin_variant, write_farm

    from orchestrator.config.farm import load_farm
    from orchestrator.plan import plan_cells
    from orchestrator.run.scheduler import run_cells
    from orchestrator.run.summary import NullListener
    from orchestrator.store.database import Store

    class Broken(NullListener):
        def run_started(self, run_id, cells):
            raise RuntimeError("the display broke")

    nodes = {"here": {"transport": "local", "workdir": str(tmp_path / "work"), "nvcc": "/usr/local/bin/nvcc"}}
    config = write_farm(tmp_path, nodes, [standin_job("standin", {"min75": standin_variant("PASS", {"min": "7.5"})})])
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        with pytest.raises(RuntimeError, match="the display broke"):
            run_cells(farm, store, plan_cells(farm, None), cache_dir=tmp_path / "archives", listener=Broken())
    finally:
        store.close()
    db = tmp_path / "results.db"
    assert [(r["status"], r["exit_code"]) for r in query(db, "SELECT status, exit_code FROM runs")] == [("aborted", 70)]
    assert query(db, "SELECT COUNT(*) AS n FROM results")[0]["n"] == 0
    assert query(db, "SELECT COUNT(*) AS n FROM node_snapshots")[0]["n"] == 0
    assert not (tmp_path / "work" / "builds").exists()


SASS = """
        Function : HGMMA
        .headerflags    @"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;  /* 0x0000001818187df0 */
        /*0020*/                   { FFMA R2, R3, R4, R2 ;                   /* 0x... */
        /*0030*/                   CALL.REL.NOINC `(HGMMA) ;                 /* 0x... */
        //## File "k.cu", line 3 wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
"""


def test_in_sass_only_opcodes_count_whole_and_other_names_are_searched():
    """An extern "C" kernel named HGMMA (its Function line, a call to it) is no HGMMA; a
    shape-qualified name (HGMMA.64x128x16.F32) is one opcode, not cut at its first lower
    case letter; a dual-issue pair's "{" is no opcode; a PTX name in the same text
    (wgmma.mma_async) is searched as a whole word, as before (a review's findings)."""
    names = ["HGMMA", "HGMMA.64x128x16.F32", "FFMA", "LDC", "CALL", "wgmma.mma_async", "QGMMA"]
    assert count_instructions(SASS, names) == {
        "HGMMA": 1,
        "HGMMA.64x128x16.F32": 1,
        "FFMA": 1,
        "LDC": 1,
        "CALL": 1,
        "wgmma.mma_async": 1,
        "QGMMA": 0,
    }


def test_a_probe_of_a_work_folder_never_sees_anothers_exec_check(tmp_path):
    """The shell probe checks its work folder runs programs with a file of its own: with
    one name for all, a probe running beside another (toolchains, Slurm) found it deleted
    and called a healthy node noexec (a review's finding, 57 of 400 here)."""
    import subprocess

    from orchestrator.config.farm_spec import NodeSpec
    from orchestrator.run.probe import probe_command

    script = probe_command(NodeSpec.model_validate({"transport": "local", "workdir": str(tmp_path / "w")}))
    for _ in range(10):
        probes = [subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(4)]
        for probe in probes:
            out, _ = probe.communicate(timeout=120)
            (work,) = [line for line in out.splitlines() if line.startswith("work ")]
            assert work.split()[2] == "1", work  # work KIB RUNS INODES


def test_the_shell_runners_clock_is_not_the_wall_clock(tmp_path, monkeypatch):
    """The shell scripts timed a run by `date`: a wall clock stepped back mid-run (NTP)
    made a kernel killed at its timeout look like one that exited 124 early, `fail`.
    Here `date` itself steps back by an hour at each call; the run is still `timeout`."""
    import sqlite3

    stepping = tmp_path / "smi" / "bin" / "date"  # first on PATH, beside the stand-in nvidia-smi
    stepping.parent.mkdir(parents=True)
    count = tmp_path / "date-calls"
    stepping.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
        "echo $(( (100000 - n * 3600) * 1000000000 ))\n"
    )
    stepping.chmod(0o755)
    summary = toy_run(
        tmp_path,
        monkeypatch,
        source="#include <unistd.h>\nint main() { sleep(30); return 0; }\n",
        job=lambda text: text.replace("variants:", "timeout: 2\nvariants:"),
        farm_yaml=lambda text: text + "    runner: shell\n",
    )
    assert dict(summary.outcomes) == {"timeout": 1}, summary.results[0][1].verdict
    with sqlite3.connect(tmp_path / "farm" / "results.db") as db:
        (seconds,) = db.execute("SELECT json_extract(stage_seconds, '$.run') FROM results").fetchone()
    assert 1.9 <= seconds < 10, seconds


class Tenant:
    """Another tenant of the node's disk, acting while the cells build: a build may write only
    in its own folder (it is confined), so the tenant is this test's thread, not the build. The
    builds wait (`wait`, a shell prefix) until it has acted, once their folders exist (the probe
    has seen the room before)."""

    def __init__(self, disk: Path, act: Callable[[], None]) -> None:
        self.go = disk / "tenant-done"
        self.pending = disk / "tenant-pending"  # renamed when done: that takes no inode the tenant left
        self.pending.touch()
        self.wait = f"for i in $(seq 600); do [ -e {self.go} ] && break; sleep 0.05; done; "
        self.thread = threading.Thread(target=self._run, args=(disk, act), daemon=True)
        self.thread.start()

    def _run(self, disk: Path, act: Callable[[], None]) -> None:
        deadline = time.monotonic() + 60
        while not list((disk / "work").glob("builds/*/*")) and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            act()
        finally:
            self.pending.rename(self.go)


def test_a_disk_filled_mid_run_by_another_tenant_is_the_nodes_fault(tmp_path, monkeypatch):
    """The probe checks a node's room at the run's start only: a disk another tenant
    fills mid-run made build-fail (the kernel's, on every cell after). A cell that
    failed is now checked again once its own files are gone: short of room, it is
    infra-error, naming the room; a failure with room to spare stays the kernel's."""
    from faults import Tmpfs

    disk = Tmpfs(tmp_path / "disk", "300m")  # the probe finds 300 MiB: room (256 MiB needed)
    fill = Tenant(disk.path, lambda: (disk.path / "tenant").write_bytes(bytes(100_000_000)))  # then fail
    tenant = fill.wait
    try:
        summary = toy_run(
            tmp_path,
            monkeypatch,
            broken="fails",
            job=lambda text: text.replace("build: 'g++ -o {binary}", f"build: '{tenant}g++ -o {{binary}}"),
            farm_yaml=lambda text: text.replace(str(tmp_path / "farm" / "node"), str(disk.path / "work")),
        )
        (disk.path / "tenant").unlink()
        # the same failure with the disk's room back is the kernel's (the job's) again
        again = toy_run(tmp_path, monkeypatch, job=lambda text: text.replace(tenant, ""))
    finally:
        disk.unmount()
    verdicts = {cell.variant: result.verdict for cell, result, _ in summary.results}
    assert verdicts["plain"].outcome.value == "pass", verdicts["plain"]
    broken = verdicts["broken"]
    assert (broken.outcome.value, broken.failed_stage) == ("infra-error", "build"), broken
    assert "ran out of room during the cell (its work folder had" in broken.reason, broken.reason
    assert {c.variant: r.verdict.outcome.value for c, r, _ in again.results}["broken"] == "build-fail"


def test_a_disk_out_of_inodes_mid_run_is_the_nodes_fault_as_one_out_of_room(tmp_path, monkeypatch):
    """Found by a red-team helper: another tenant taking every inode of the node's disk
    (with blocks to spare) made build-fail, where one taking its blocks was infra-error:
    the probe and the check after a failure read free blocks only."""
    from faults import Tmpfs

    disk = Tmpfs(tmp_path / "disk", "300m", inodes=3000)  # the probe finds nearly 3000 inodes free

    def every_inode() -> None:
        with contextlib.suppress(OSError):
            for i in range(3000):
                (disk.path / f"t{i}").touch()

    tenant = Tenant(disk.path, every_inode).wait  # every inode left, then a build
    try:
        summary = toy_run(
            tmp_path,
            monkeypatch,
            broken="fails",
            job=lambda text: text.replace("build: 'g++ -o {binary}", f"build: '{tenant}g++ -o {{binary}}"),
            farm_yaml=lambda text: text.replace(str(tmp_path / "farm" / "node"), str(disk.path / "work")),
        )
    finally:
        disk.unmount()
    broken = {cell.variant: result.verdict for cell, result, _ in summary.results}["broken"]
    assert (broken.outcome.value, broken.failed_stage) == ("infra-error", "build"), broken
    assert "ran out of room during the cell (its work folder had" in broken.reason, broken.reason
    assert "inodes free" in broken.reason, broken.reason


@pytest.mark.parametrize(
    "run",
    [
        "{binary}; true",
        "! {binary}",
        "{binary}; exit 0",
        "exec {binary}",
        "cd . && {binary} 3",
        "env N=3 {binary}",  # a program that starts the kernel itself
        "timeout 60 {binary}",
    ],
)
def test_a_runs_exit_status_is_the_kernels_own(tmp_path, monkeypatch, run):
    """Found in review: `{binary}; true` loaded, and a kernel that printed its pass marker
    and exited 3 was `pass`, exit 0. The kernel's own status is the run's now, whatever
    the job's run does after it."""
    summary = toy_run(
        tmp_path,
        monkeypatch,
        source='#include <cstdio>\nint main() { std::printf("toy: PASS\\n"); return 3; }\n',
        job=lambda text: text.replace("    cc:", f"    run: '{run}'\n    cc:"),
    )
    ((_, result, _),) = summary.results
    assert (result.verdict.outcome.value, result.evidence.run_exit) == ("fail", 3), result.verdict


KERNEL = """#!/bin/sh
echo "kernel: PASS"; echo "kernel: mismatch" >&2; exit ${KRC:-0}
"""


@pytest.mark.parametrize(
    ("run", "krc", "statuses", "rc", "other"),
    [
        ("{binary}", "0", [0], 0, ""),
        ("{binary}", "3", [3], 3, ""),
        ("{binary}; exit 0", "3", [3], 0, ""),  # an exit after the kernel cannot speak for it
        ("exec {binary}", "4", [4], 4, ""),  # run as the shell's child, so that its status is noted
        ("! {binary}", "0", [0], 1, ""),  # the run's own failure is the run's, not the kernel's
        ("{binary} && false", "0", [0], 1, ""),
        ("echo PA''SS; {binary} > log; cat log", "2", [2], 0, "PASS\n"),  # other commands' output apart
        ("X=1 env Y=2 {binary} --n 3", "4", [4], 4, ""),
        ("cd / && timeout 5 {binary}", "0", [0], 0, ""),
        ("nice -n 1 {binary}", "5", [5], 5, ""),  # a launcher's operand: its command is the kernel's
        ("set -e; cd . && {binary}; echo after", "5", [5], 5, ""),  # noted before set -e ends the shell
        ('EXPECTED="$(echo toy: PA""SS)" {binary}', "0", [0], 0, ""),  # a substitution before it is the run's
        ("for n in 1 2; do {binary} $n; done", "0", [0, 0], 0, ""),
        ("{binary} # a comment {binary}", "6", [6], 6, ""),
        ("true || {binary}", "0", [], 0, ""),
    ],
)
def test_a_runs_output_and_failure_are_the_kernels_own(
    tmp_path: Path, run: str, krc: str, statuses: list[int], rc: int, other: str
) -> None:
    """Only the commands naming {binary} print into the farm's files, and each one's exit
    status is noted, whatever comes after it (`; exit 0` passed a failing kernel with the
    shell function of before, and a wrapper file hid the kernel from `valgrind {binary}`)."""
    work = tmp_path / "work"
    work.mkdir()
    kernel = work / "k"
    kernel.write_text(KERNEL)
    kernel.chmod(0o755)
    done = subprocess.run(
        ["sh", "-c", kernel_run(run, str(kernel), kernel_files(str(work)))],
        cwd=work,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "KRC": krc},
        check=False,
    )
    assert kernel_statuses((work / KERNEL_FILES[0]).read_bytes()) == statuses
    assert done.returncode == rc
    assert done.stdout == "kernel: PASS\n" * len(statuses)
    assert done.stderr == "kernel: mismatch\n" * len(statuses)
    assert (work / KERNEL_FILES[1]).read_text() == other


def test_the_farms_function_runs_only_a_command_of_the_cells_copy(tmp_path: Path) -> None:
    """The function each kernel command is called through is the cell's own (a random
    name), and it runs nothing that does not hold the cell's copy among its words: a run
    that called it by name with `echo PASS` had that noted as a kernel's pass, for a
    kernel that never ran (a red-team review's)."""
    import re as re_

    work = tmp_path / "work"
    work.mkdir()
    kernel = work / "k"
    kernel.write_text(KERNEL)
    kernel.chmod(0o755)
    files = kernel_files(str(work))
    command = kernel_run("true; {binary}", str(kernel), files)
    (name,) = set(re_.findall(r"(farm_kernel_[0-9a-f]{12})\(\)", command))
    assert name not in kernel_run("true; {binary}", str(kernel), files)  # another each time
    forged = command.replace("( true;", f"( {name} echo 'kernel: PASS'; {name} sh -c 'exit 0';", 1)
    assert forged != command
    done = subprocess.run(
        ["sh", "-c", forged], cwd=work, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "KRC": "3"}
    )
    assert kernel_statuses((work / KERNEL_FILES[0]).read_bytes()) == [3]  # the kernel's alone
    assert done.stdout == "kernel: PASS\n" and done.returncode == 3  # the kernel's own line, once


def test_the_other_commands_output_is_shown_on_one_bounded_line() -> None:
    assert other_output(b"a\n\n  b  \n") == "a / b"
    assert other_output(b"x" * 500, limit=10) == "..." + "x" * 10
    assert other_output(b"") == ""


def _runner(runner: str):
    return lambda text: text.replace("    transport: local\n", f"    transport: local\n    runner: {runner}\n")


HANGS_AFTER_PASS = (
    "#include <cstdio>\n#include <unistd.h>\n"
    'int main() { std::printf("toy: PASS\\n"); std::fflush(stdout); sleep(30); return 0; }\n'
)
WARNS_AND_RUNS = (
    '#include <cstdio>\nint main() { std::fprintf(stderr, "toy needs CC 8.0; running anyway\\n");'
    ' std::printf("toy: PASS\\n"); return 0; }\n'
)
PLAIN = '#include <cstdio>\nint main() { std::printf("toy: PASS\\n"); return 0; }\n'
FAILS = '#include <cstdio>\nint main() { std::printf("toy: wrong numbers\\n"); return 1; }\n'
SAYS_NOT_FOUND = (
    '#include <cstdio>\nint main() { std::fprintf(stderr, "sh: 1: nvidia-cuda-mps-control: not found\\n");'
    " return 127; }\n"
)
REMOVES_ITSELF = (
    "#include <cstdio>\n#include <unistd.h>\n"
    "int main(int argc, char **argv) { if (argc > 1) { unlink(argv[0]); return 0; }"
    ' std::printf("toy: PASS\\n"); return 0; }\n'
)


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_launcher_not_there_is_the_nodes_trouble_by_the_farms_own_look(tmp_path, monkeypatch, runner):
    """The farm's function looks for the program of each kernel command before it runs it:
    a missing launcher is the node's trouble by that look, not by the shell's words for it,
    which a node's locale changes ("Befehl nicht gefunden") and a kernel could print."""

    def job(text: str) -> str:
        return text.replace("    cc:", "    run: 'nsys profile {binary}'\n    cc:")

    summary = toy_run(tmp_path, monkeypatch, source=PLAIN, job=job, farm_yaml=_runner(runner))
    ((_, result, _),) = summary.results
    assert result.verdict.outcome.value == "infra-error", result.verdict
    assert "is not there, or not executable" in result.verdict.reason, result.verdict


@pytest.mark.parametrize("runner", ["auto", "cell", "shell"])
@pytest.mark.parametrize(
    ("source", "run", "cc", "outcome"),
    [
        # `timeout` ended the kernel after its marker: its 124 is noted, the echo after it is not the
        # kernel, and the run's own limit killing it is a timeout (not a refusal where one is due)
        (HANGS_AFTER_PASS, 'timeout 2 {binary}; echo "kernel exited $?"', None, "timeout"),
        (HANGS_AFTER_PASS, 'timeout 2 {binary}; echo "kernel exited $?"', "{min: '8.0'}", "timeout"),
        # the kernel only warned and ran on a card it must refuse; the failing check after it is no refusal
        (WARNS_AND_RUNS, "{binary} && test -e no-such-file", "{min: '8.0'}", "missing-refusal"),
        # the node lacks the launcher that starts the kernel: the node's fault, not the kernel's
        (PLAIN, "nsys profile {binary}", None, "infra-error"),
        (PLAIN, "nice cuda-memcheck {binary}", None, "infra-error"),  # behind another launcher
        # a kernel that failed before a launcher was missing: its failure is the verdict
        (PLAIN.replace("return 0", "return 1"), "{binary}; nsys profile {binary}", None, "fail"),
        (PLAIN, "nice -n 1 {binary} 3", None, "pass"),  # a launcher's operand
        # a quoted substitution before the kernel: its output is the run's, not the kernel's (a red-team
        # helper's: the farm read it as the kernel's, and the kernel's own as the run's)
        (PLAIN, 'EXPECTED="$(echo toy: mismatch)" {binary}', None, "pass"),
        # its gate's words and exit 1, but its pass line too: the work ran on a card it must refuse, so
        # no refusal (red-team round 115; it was expected-refusal)
        (WARNS_AND_RUNS.replace("return 0", "return 1"), "set -e; {binary}", "{min: '8.0'}", "missing-refusal"),
        (PLAIN, "true || {binary}", None, "fail"),  # the run never started the kernel
        # found by a red-team helper: a function of the run's named like a launcher ran in place of
        # the launcher (a false pass); a kernel printing the shell's words and exiting 127 read as the
        # node's trouble; a run removing the kernel's copy before calling it again, as the node's too
        (FAILS, 'nice() ( echo "toy: PASS" ); nice {binary}', None, "fail"),
        (SAYS_NOT_FOUND, "{binary}", None, "fail"),
        # a confined kernel cannot remove its copy (it lies beside its work folder): its second call runs
        (REMOVES_ITSELF, "{binary} warmup && {binary}", None, "fail unless confined"),
    ],
)
def test_the_kernels_command_is_judged_whatever_the_run_does_around_it(
    tmp_path, monkeypatch, runner, source, run, cc, outcome
):
    """Found by a red-team helper against a wrapper file in place of {binary}: these gave a
    false pass, a false expected refusal, or a kernel's failure for the node's."""

    def job(text: str) -> str:
        text = text.replace("    cc:", f"    run: '{run}'\n    cc:")
        return text.replace("{min: '7.5'}", cc) if cc else text

    summary = toy_run(tmp_path, monkeypatch, source=source, job=job, farm_yaml=_runner(runner))
    ((_, result, _),) = summary.results
    if outcome == "fail unless confined":
        outcome = "fail" if runner == "shell" else "pass"
    assert result.verdict.outcome.value == outcome, result.verdict


@pytest.mark.parametrize("runner", ["auto", "cell"])
def test_a_confined_run_cannot_rewrite_the_kernels_copy(tmp_path, monkeypatch, runner):
    """A second red-team round: the copy lay in the work folder, which a confined run may
    write, so `for f in *; do printf '...echo PASS' > "$f"; done; {binary}` ran a fake in its
    place (a false pass). It lies beside the work folder now: the kernel that runs is the
    one built (and fails here). The shell runner confines nothing, and says so."""
    forge = (  # wherever the copy lies: in the work folder (before) or beside it
        'printf "#!/bin/sh\\necho toy: PASS\\n" > fake; chmod +x fake; '
        'for f in * ../bin/*; do cp fake "$f"; done; {binary}'
    )

    def job(text: str) -> str:
        return text.replace("    cc:", f"    run: '{forge}'\n    cc:")

    summary = toy_run(tmp_path, monkeypatch, source=FAILS, job=job, farm_yaml=_runner(runner))
    ((_, result, _),) = summary.results
    assert result.verdict.outcome.value == "fail", result.verdict
    assert "wrong numbers" in result.stdout.kept.decode(), result.stdout.kept


FAKE_LAUNCHER = '#!/bin/sh\necho "toy: PASS"\n'  # a launcher of the run's own making: the marker, exit 0


@pytest.mark.parametrize("shell", ["dash", "bash"])
@pytest.mark.parametrize(
    ("run", "path", "note"),
    [
        # not there: the node's trouble, by the farm's own look (behind another launcher too; bash's
        # keyword `time` passed `command -v` where dash has none: one run, two verdicts)
        ("nice numactl {binary}", "{tools}", "cannot-start"),
        ("time {binary}", "{tools}", "cannot-start"),
        ("/no/such/nice {binary}", "{tools}", "cannot-start"),
        # a fake of the run's own in its work folder, which an empty or `.` entry of the node's PATH
        # names: the farm runs the nice it found on the PATH's absolute entries (the kernel fails)
        ("nice {binary}", ":{tools}", "1"),
        ("nice {binary}", ".:{tools}", "1"),
        # where the run could have written it: no evidence (a false pass before)
        ("nice {binary}", "{fakes}:{tools}", "launcher-writable"),
        ("{fakes}/nice {binary}", "{tools}", "launcher-writable"),
        # words that name a launcher but are an option's value or a variable: no launchers
        ("env -u nsys {binary}", "{tools}", "1"),
        ("env PROFILER=/opt/nvidia/bin/nsys {binary}", "{tools}", "1"),
        ("nice env {binary}", "{tools}", "1"),
        # a second round: an option's value named like the launcher after it, with `.` on the PATH
        # (the value was looked up, env found ./nice itself); a link in /tmp to the real folder,
        # which the run could point elsewhere once looked at; a node without readlink, under set -e
        ("env -u nice nice {binary}", ".:{tools}", "1"),
        ("{fakes}/l/nice {binary}", "{tools}", "launcher-writable"),
        ("set -e; nice {binary}", "{bare}", "1"),
    ],
)
def test_each_launcher_is_the_file_the_farm_found_on_the_nodes_path(tmp_path, request, shell, run, path, note):
    """Red-team findings: `nice numactl {binary}` on a node without numactl was the kernel's
    fail (nice's 127); `./nice {binary}`, `/tmp/nice {binary}` or a node PATH with an empty
    or `.` entry ran a fake nice the run had written (a false pass); `env -u nsys {binary}`
    was the node's trouble on a node without nsys. Each launcher the loader names is looked
    for on the node's PATH (its absolute entries), and run by the path found, unless it lies
    where the run could have written it. The kernel here fails; a fake launcher would pass it."""
    # the node's tools outside /tmp, where a run could write them (its cell's folder is under /tmp here)
    home = Path(tempfile.mkdtemp(prefix="farm-test-tools-", dir=Path.home()))
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    tools, bare, fakes, work = home / "bin", home / "bare", tmp_path / "fakes", tmp_path / "cell" / "work"
    for folder in (tools, bare, fakes, work):
        folder.mkdir(parents=True)
    for name in ("nice", "find", "readlink", "env"):  # links to the system's: outside /tmp once followed
        (tools / name).symlink_to(shutil.which(name))
        if name != "readlink":
            (bare / name).symlink_to(shutil.which(name))
    (fakes / "l").symlink_to(tools)
    for folder in (fakes, work):
        (folder / "nice").write_text(FAKE_LAUNCHER)
        (folder / "nice").chmod(0o755)
    binary = work / "k"
    binary.write_text('#!/bin/sh\necho "toy: wrong numbers"\nexit 1\n')
    binary.chmod(0o755)
    files = [str(tmp_path / "status"), str(tmp_path / "other")]
    command = kernel_run(run.format(binary="{binary}", fakes=fakes), str(binary), files)
    env = {"PATH": path.format(tools=tools, fakes=fakes, bare=bare)}
    done = subprocess.run([f"/bin/{shell}", "-c", command], cwd=work, env=env, capture_output=True, text=True)
    started = ["started"] if note == "1" else []  # noted before the kernel starts (commands.STARTED_NOTE)
    assert (tmp_path / "status").read_text().split() == [*started, note], done.stdout + done.stderr
    assert done.returncode == (1 if note == "1" else 127)
    assert "toy: PASS" not in done.stdout


@pytest.mark.parametrize(
    ("state", "note"), [("missing", "copy-gone"), ("mode-changed", "copy-gone"), ("noexec-mount", "cannot-start")]
)
def test_a_copy_the_run_cannot_call_is_told_from_a_node_that_cannot_run_it(tmp_path, state, note):
    """The farm's function notes why the kernel's copy could not be called: gone or made not
    executable (by the run: it was checked just before) fails the cell; a copy with its x bit
    on a noexec mount is the node's trouble."""
    folder = tmp_path / "work"
    folder.mkdir()
    if state == "noexec-mount":
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,noexec", "tmpfs", str(folder)], check=True)
    try:
        binary = folder / "k"
        binary.write_text("#!/bin/sh\necho toy: PASS\n")
        binary.chmod(0o755)
        if state == "missing":
            binary.unlink()
        elif state == "mode-changed":
            binary.chmod(0o644)
        files = [str(tmp_path / "status"), str(tmp_path / "other")]
        done = subprocess.run(["sh", "-c", kernel_run("{binary}", str(binary), files)], cwd=folder)
        assert done.returncode == 127
        assert (tmp_path / "status").read_text().split() == [note]
    finally:
        if state == "noexec-mount":
            subprocess.run(["umount", "-l", str(folder)], check=False)
