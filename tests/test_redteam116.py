"""Red-team round 116: node faults the farm had not met, on real sshd nodes.

- The node's work folder removed under a running cell (a cleaner of old files under /tmp, an
  operator's `rm -rf` of the farm's folder): the cell's stdout, stderr and status files went with
  it, their empty read-back said "the run never started the kernel (exit 0)", and a kernel that
  ran and passed was judged `fail`, exit 1, on all three runners. Now infra-error, retried.
- The node's user out of processes (a cgroup's pids.max reached mid-run): gcc's "collect2: fatal
  error: vfork: Resource temporarily unavailable" was the kernel's `build-fail`, exit 1.
- nvidia-smi hanging after the probe (a wedged driver) read "nvidia-smi no longer lists GPU 0
  (rc=124: nothing)": it lists nothing because it never answered; now it says so.

Held already (kept as guards): the work folder removed during a build, the work folder remounted
read-only mid-run, a login whose TMPDIR is full from the start.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from faults import Tmpfs, descendants, faults_job, faults_variant, wait_for
from faults import write_fault_farm as write_farm
from nodes import CARDS, SshNode, processes_matching, query, running_node
from test_faults import attempts, kernel_running, results, run_farm

from orchestrator.errors import EXIT_INFRA, EXIT_OK
from orchestrator.run import probe
from orchestrator.run.node_limits import fork_failed

MIN75 = {"min": "7.5"}
NAME = "n116"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    yield from running_node(NAME, tmp_path / "node", CARDS["t4"])


def farm_of(node: SshNode, tmp_path: Path, variants: dict[str, dict[str, object]]) -> Path:
    entry = node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=3)
    return write_farm(tmp_path, {NAME: entry}, [faults_job(variants)], retries=1, retry_backoff=0.2)


def midrun(
    node: SshNode, tmp_path: Path, fault: Callable[[Path], None], started: Callable[[Path], object] | None = None
) -> tuple[int, dict, list]:
    """A run of a slow cell and one after it; `fault(workdir)` once `started(workdir)` (default:
    the slow cell's kernel running). (exit code, rows by variant, attempts)."""
    workdir = tmp_path / "work"
    slow = faults_variant("SLOWPASS", MIN75, "SLEEP_S=3", timeout=30)
    config = farm_of(node, tmp_path, {"slow": slow, "after": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0")})
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(run=run_farm(config)), daemon=True)
    thread.start()
    ready = started or (lambda w: kernel_running(w, NAME, "slow"))
    wait_for(lambda: ready(workdir) or not thread.is_alive(), 60, "the fault's moment")
    fault(workdir)
    thread.join(timeout=120)
    assert not thread.is_alive(), "the farm never finished"
    summary, _ = outcome["run"]  # type: ignore[misc]
    db = tmp_path / "results.db"
    rows = {variant: row for (_, variant), row in results(db, summary.run_id).items()}
    tries = [dict(r) for r in query(db, "SELECT * FROM attempts WHERE run_id = ? ORDER BY id", summary.run_id)]
    return summary.exit_code, rows, tries


def test_a_work_folder_removed_under_a_running_cell_is_no_kernel_verdict(
    node: SshNode, tmp_path: Path, runner: str
) -> None:
    """Before: `fail` "the run never started the kernel (exit 0)" for a kernel that passed, exit 1.
    Figure: 1 removal mid-run; its try infra-error naming the lost files, its retry passes; exit 0.
    Under the shell scripts the run is unconfined, and could have removed them itself: there the
    cell is `fail` saying so (review round 118, lost_files.py), never the node's trouble."""
    code, rows, tries = midrun(node, tmp_path, shutil.rmtree)
    if runner == "shell":
        assert rows["slow"]["outcome"] == "fail", rows["slow"]["reason"]
        assert "could have removed them itself" in rows["slow"]["reason"], rows["slow"]["reason"]
        assert [t["status"] for t in tries if t["variant"] == "slow"] == ["ok"]
        return
    assert rows["slow"]["outcome"] == "pass", rows["slow"]["reason"]
    assert rows["after"]["outcome"] == "pass", rows["after"]["reason"]
    slow = [t for t in tries if t["variant"] == "slow"]
    assert [t["status"] for t in slow] == ["infra", "ok"], slow
    assert "were gone when its run ended" in slow[0]["error"] and ".farm-status" in slow[0]["error"], slow[0]
    assert code == EXIT_OK


def test_a_work_folder_removed_during_a_build_is_no_kernel_verdict(node: SshNode, tmp_path: Path) -> None:
    """Held: the build's inputs are checked after it (infra, retried). Figure: exit 0, 2/2 pass."""
    build = faults_variant("SLOWPASS", MIN75, "SLEEP_S=0")
    build["build"] = "sleep 3 && " + str(build["build"])
    config = farm_of(node, tmp_path, {"slowbuild": build, "after": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0")})
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(run=run_farm(config)), daemon=True)
    thread.start()
    wait_for(lambda: processes_matching("sleep 3 && g++") or not thread.is_alive(), 60, "the slow build")
    shutil.rmtree(tmp_path / "work")
    thread.join(timeout=120)
    summary, _ = outcome["run"]  # type: ignore[misc]
    rows = results(tmp_path / "results.db", summary.run_id)
    assert {row["outcome"] for row in rows.values()} == {"pass"}, rows
    assert [t["status"] for t in attempts(tmp_path / "results.db", summary.run_id, NAME, "slowbuild")] == [
        "infra",
        "ok",
    ]


def remounted_midrun(node: SshNode, tmp_path: Path, option: str) -> tuple[int, dict, list]:
    """midrun, its fault the work folder bind-mounted over itself and remounted with OPTION (ro,
    noexec) while the slow cell's kernel runs; unmounted after."""
    mounted: list[Path] = []

    def remount(workdir: Path) -> None:
        subprocess.run(["mount", "--bind", str(workdir), str(workdir)], check=True)
        mounted.append(workdir)
        subprocess.run(["mount", "-o", f"remount,bind,{option}", str(workdir)], check=True)

    try:
        return midrun(node, tmp_path, remount)
    finally:
        for workdir in mounted:
            subprocess.run(["umount", "-l", str(workdir)], check=False)


def test_a_work_folder_turned_read_only_mid_run_is_the_nodes_trouble(node: SshNode, tmp_path: Path) -> None:
    """Held: the running cell's files were open; the next cell's build lock cannot be made,
    infra-error with "Read-only file system". Figure: 1 pass, 1 infra-error, exit 4."""
    code, rows, _ = remounted_midrun(node, tmp_path, "ro")
    assert rows["slow"]["outcome"] == "pass", rows["slow"]["reason"]
    assert rows["after"]["outcome"] == "infra-error" and "Read-only file system" in rows["after"]["reason"]
    assert code == EXIT_INFRA


def out_of_processes(node: SshNode, tmp_path: Path, tag: str) -> tuple[int, dict, list]:
    """midrun, its fault the node's sshd and everything under it put in a pids cgroup at its limit
    while the first cell runs: the next cell's gcc cannot vfork."""
    group = Path("/sys/fs/cgroup/pids") / f"{tag}-{node.port}"
    if not group.parent.is_dir():
        group = Path("/sys/fs/cgroup") / f"{tag}-{node.port}"  # cgroup v2
    group.mkdir()

    def at_its_limit(_: Path) -> None:
        assert node.proc is not None
        for pid in [node.proc.pid, *(pid for pid, _ in descendants(node.proc.pid))]:
            with contextlib.suppress(OSError):  # ended meanwhile
                (group / "cgroup.procs").write_text(str(pid))
        (group / "pids.max").write_text((group / "pids.current").read_text().strip())

    try:
        return midrun(node, tmp_path, at_its_limit)
    finally:
        (group / "pids.max").write_text("max")
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (group.parent / "cgroup.procs").write_text(pid)
        group.rmdir()


def test_a_node_out_of_processes_is_no_build_fail(node: SshNode, tmp_path: Path) -> None:
    """The node's sshd and everything under it put in a pids cgroup at its limit while the first
    cell runs: the next cell's gcc cannot vfork. Before: `build-fail` "collect2: fatal error: vfork:
    Resource temporarily unavailable", exit 1. Figure: infra-error saying out of processes, exit 4."""
    code, rows, tries = out_of_processes(node, tmp_path, "rt116")
    assert rows["after"]["outcome"] == "infra-error", rows["after"]["reason"]
    said = [t["error"] or "" for t in tries if t["variant"] == "after"]
    # gcc's vfork of collect2, not the build's own sh ("Cannot fork"): the runner's room watch takes no
    # pid of the group (it samples from the runner's own wait, red-team round 266)
    assert any("out of processes" in error and "vfork" in error for error in said), said
    assert code == EXIT_INFRA


def test_a_hung_nvidia_smi_after_a_failed_run_is_said_hung(
    node: SshNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's nvidia-smi answers the probe, then hangs (a wedged driver). Before: "nvidia-smi
    no longer lists GPU 0 ... (rc=124: nothing)". Figure: infra-error saying it did not answer."""
    monkeypatch.setattr(probe, "TOOL_SECONDS", 2)
    monkeypatch.setattr(probe, "TOOL", f"timeout -k 1 {probe.TOOL_SECONDS}")
    flag = tmp_path / "probed"
    smi, real = node.node_bin / "nvidia-smi", node.node_bin / "nvidia-smi.real"
    smi.rename(real)
    smi.write_text(f'#!/bin/sh\nif [ -e {flag} ]; then exec sleep 600; fi\ntouch {flag}\nexec {real} "$@"\n')
    smi.chmod(0o755)
    config = farm_of(node, tmp_path, {"bad": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0", run="{binary}; exit 1")})
    summary, _ = run_farm(config)
    row = results(tmp_path / "results.db", summary.run_id)[(NAME, "bad")]
    assert row["outcome"] == "infra-error", row["reason"]
    assert "nvidia-smi did not answer about GPU 0" in row["reason"] and "no longer lists" not in row["reason"]


def test_a_full_login_tmpdir_is_the_nodes_trouble(tmp_path: Path) -> None:
    """Held: a login whose TMPDIR is full from the start is refused at its probe, naming the
    temporary folder. Figure: 2 infra-error, exit 4."""
    full = Tmpfs(tmp_path / "tmp", "64k")
    try:
        with pytest.raises(OSError):
            (full.path / "fill").write_bytes(b"x" * 100_000)
        one = SshNode(NAME, tmp_path / "node", CARDS["t4"])
        one.prepare()
        one.config.write_text(one.config.read_text().replace("SetEnv HOME=", f"SetEnv TMPDIR={full.path} HOME="))
        one.start()
        try:
            code, rows, _ = midrun(one, tmp_path, lambda _: None, started=lambda _: True)
        finally:
            one.stop()
    finally:
        full.unmount()
    assert {row["outcome"] for row in rows.values()} == {"infra-error"}
    assert all("temporary folder has 0 MiB free" in row["reason"] for row in rows.values())
    assert code == EXIT_INFRA


@pytest.mark.parametrize(
    ("line", "node_words"),
    [
        ("collect2: fatal error: vfork: Resource temporarily unavailable", True),
        ("g++: fatal error: cannot execute 'cc1plus': vfork: Resource temporarily unavailable", True),
        ("bash: fork: retry: Resource temporarily unavailable", True),
        ("/bin/sh: 1: Cannot fork", True),
        ("sh: 1: eval: Cannot fork", True),
        ("k.cu(3): error: vfork: Resource temporarily unavailable", False),  # a source's #error
        ("k.cpp:3:5: error: fork: Resource temporarily unavailable", False),
    ],
)
def test_fork_failure_words(line: str, node_words: bool) -> None:
    assert bool(fork_failed(f"before\n{line}\nafter".encode())) is node_words
