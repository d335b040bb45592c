"""Red-team round 266: the python runner's build-room watch (node/room.py, round 262) sampled the
build's folders in a thread of its own, and a thread takes a pid of the node's pids cgroup.

Broke (before/after): on a node out of processes, the build's own `sh` failed to fork first
("sh: 1: Cannot fork") where gcc's vfork had failed before, and the compiler's words (a German
node's "vfork: Die Ressource ist zur Zeit nicht verfügbar", red-team 224) no longer reached the
verdict. Now the watch samples from the runner's own wait (spawn.wait_for's tick): no thread, no
process; a build gets every pid its node leaves it, and the compiler's fork is the one that fails.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm_env
from test_node_runner import build_spec

# the runner's build stage in a process of its own (as run_plan blocks SIGCHLD), in the pids cgroup
# argv[2] names (where one is named) at a pids.max of argv[3]: set before the build, by the runner itself
BUILD_IN = """
import json, os, signal, sys
from orchestrator.run import noderunner
if len(sys.argv) > 2:
    with open(sys.argv[2] + "/cgroup.procs", "w") as procs:
        procs.write(str(os.getpid()))
    with open(sys.argv[2] + "/pids.max", "w") as most:
        most.write(sys.argv[3])
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
out = noderunner.Stage()
noderunner.build(out, json.loads(sys.argv[1]), dict(os.environ), {})
sys.stdout.write(out.text.decode())
"""


def _build(tmp_path: Path, command: str, *cgroup: str) -> tuple[str, str, Path]:
    """(the stage's text, the runner's stderr, the cell's copy of the binary) of a build of COMMAND."""
    build_dir = tmp_path / "builds" / "n" / "k-v-key"
    run_dir = tmp_path / "cells" / "r" / "n" / "k-v"
    spec = build_spec(build_dir, run_dir, command, [])
    done = subprocess.run(
        [sys.executable, "-c", BUILD_IN, json.dumps(spec), *cgroup],
        capture_output=True,
        text=True,
        env=farm_env(),
        timeout=60,
    )
    return done.stdout, done.stderr, run_dir / "work" / "kern"


def test_the_python_runners_build_starts_no_thread(tmp_path: Path) -> None:
    """The build counts its runner's threads (/proc/$PPID/task) while it runs. Before: 2 (the room
    watch's thread). Figure: 1, the runner's own; the build still says its room (`@@farm build-room`)."""
    said, errors, copy = _build(tmp_path, "sleep 0.5; ls /proc/$PPID/task | wc -l > kern")
    assert "@@farm rc=0" in said, (said, errors)
    assert copy.read_text().strip() == "1", copy.read_text()
    assert said.count("@@farm build-room ") == 2, said


@pytest.fixture
def pids_group(tmp_path: Path) -> Iterator[Path]:
    """A pids cgroup of its own (v1, else v2), emptied and removed after."""
    group = Path("/sys/fs/cgroup/pids") / f"rt266-{tmp_path.name}"
    if not group.parent.is_dir():
        group = Path("/sys/fs/cgroup") / f"rt266-{tmp_path.name}"  # cgroup v2
    group.mkdir()
    try:
        yield group
    finally:
        (group / "pids.max").write_text("max")
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # ended meanwhile
                (group.parent / "cgroup.procs").write_text(pid)
        group.rmdir()


def test_a_build_given_exactly_its_processes_builds(tmp_path: Path, pids_group: Path) -> None:
    """The runner in a pids cgroup leaving room for exactly its build's processes: the runner, the
    build's sh and the two programs sh runs at once (its first `sleep 0.1` lets the thread that confines
    the build, Landlock, end first). Before: "sh: 1: Cannot fork" (the room watch's thread took the
    group's last pid), rc=2, no binary. Figure: rc=0, the binary built and copied."""
    command = "sleep 0.1; sleep 0.3 & sleep 0.2; wait; echo built > kern"
    said, errors, copy = _build(tmp_path, command, str(pids_group), "4")
    log = tmp_path / "builds" / "n" / "k-v-key" / "build.log"
    assert "@@farm rc=0" in said, (said, errors, log.read_text() if log.exists() else "")
    assert copy.read_text() == "built\n"


def test_a_build_whose_confining_thread_cannot_start_says_the_node_is_out_of_processes(
    tmp_path: Path, pids_group: Path
) -> None:
    """pids.max 1: the runner alone. The build is started, confined (Landlock), from a thread of its
    own (spawn.spawn_confined), which cannot start. Before: RuntimeError("can't start new thread") raised
    out of the stage (the runner's own fault, not said as the node's pids): the stage's words named no
    process limit. Figure: the stage's error is the runner's "cannot start sh -c: ..." that
    node_limits.spawn_failed reads as out of processes."""
    from orchestrator.run.node_limits import forkless

    said, errors, copy = _build(tmp_path, "echo built > kern", str(pids_group), "1")
    assert not copy.exists(), (said, errors)
    assert "can't start new thread" in said + errors, (said, errors)
    assert forkless(said + errors), (said, errors)
