"""Red-team round 262: a node's disk that fills up during a build and frees again before the farm's
look, on real sshd nodes, both node runners, with a real tmpfs as the node's work folder.

Broke (before/after): a build failed by "No space left on device" (another job's temp files filling
the disk, a log rotating) was stored as the kernel's `build-fail`, exit 1: the look after the failed
build (stages/base.py `_node_trouble`, its room check and round 260's canary) came once the room was
back. The log's words are the kernel's to write, so they decide nothing: the build's wrapper (the
shell runner's stages/room.py, the python runner's node/room.py) now samples the build folder's file
system and the login's temporary folder while the build runs and says their lowest on the stage's own
`@@farm build-room` lines; a failed build that ran short is the node's, infra-error. A kernel printing
the words with plenty of room stays its `build-fail`.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from farm_cli import farm
from nodes import CARDS, SshNode, query, running_node

from orchestrator.run.stages.base import CellStages
from orchestrator.run.stages.room import lowest_room

# says it began (a file BEGUN in its folder), waits while another tenant (`tenant`) fills its folder's
# file system outside the build's folders and frees it, and fails as nvcc would. A build that filled
# the disk with its own files (dd's in its folder) is its own build-fail since round 273
BEGUN = "farm-rt262-begun"
FILLS = (
    f"test -e {{sources}} -o -e {{binary}}; touch {BEGUN}; sleep 4; "
    "echo 'nvcc fatal   : Could not write to file: No space left on device'; exit 1"
)


@contextlib.contextmanager
def tenant(disk: Path) -> Iterator[None]:
    """Another tenant of DISK: once a build there has begun (BEGUN), fills DISK outside the farm's
    work folder until it is full, holds it past the samplers' interval (1.5 s), and frees it."""

    def fill() -> None:
        deadline = time.monotonic() + 240
        while not any(disk.rglob(BEGUN)) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(OSError), open(disk / "tenant-fill", "wb") as out:
            while True:
                out.write(bytes(1 << 20))
                out.flush()
        time.sleep(1.5)
        (disk / "tenant-fill").unlink(missing_ok=True)

    thread = threading.Thread(target=fill, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(timeout=10)


# the words alone, with the disk's room untouched
SAYS = "test -e {sources} -o -e {binary}; echo 'fatal error: writing /tmp/ccX.s: No space left on device'; exit 1"


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Path]:
    """A 320 MiB tmpfs (the farm needs 256 MiB free there at the probe), open to the node's login."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320m,mode=1777", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    yield from running_node("rt262", tmp_path / "node", CARDS["t4"])


def _verify(node: SshNode, root: Path, workdir: Path, build: str, runner: str) -> tuple:
    """`farm verify --all` of one job whose build is BUILD on NODE (RUNNER): (its row, the run)."""
    (root / "kernels").mkdir(parents=True)
    (root / "jobs").mkdir()
    (root / "kernels" / "k.cu").write_text("int main() { return 0; }\n")
    job = {
        "kernel": "k",
        "sources": ["kernels/k.cu"],
        "pass_marker": "toy: PASS",
        "refusal_marker": "needs CC",
        "build_timeout": 120,
        "variants": {"plain": {"build": build, "inspect": "true", "cc": {"min": "7.5"}}},
    }
    (root / "jobs" / "k.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    nodes = {"rt262": node.farm_entry(workdir, runner=runner)}
    farm_file = {"database": "sqlite:///results.db", "reports": "reports", "jobs": "jobs", "nodes": nodes}
    (root / "farm.yaml").write_text(yaml.safe_dump(farm_file, sort_keys=False))
    done = farm("verify", "--all", "--no-report", "--config", str(root / "farm.yaml"), cwd=root, timeout=300)
    assert (root / "results.db").exists(), (done.stdout[-2000:], done.stderr[-2000:])
    rows = query(root / "results.db", "SELECT kernel, outcome, reason FROM results ORDER BY id")
    assert len(rows) == 1, (rows, done.stdout[-3000:])
    return dict(rows[0]), done


@pytest.mark.parametrize("runner", ["shell", "auto"])
def test_a_disk_filled_and_freed_during_the_build_is_the_nodes(
    node: SshNode, mounted: Path, tmp_path: Path, runner: str
) -> None:
    """Before: `build-fail` naming "No space left on device", exit 1 (the look found the room back).
    Figure: infra-error saying the node ran short of room while the build ran, no verdict on the
    kernel, exit 4, under the shell runner and the python one alike. Since round 273 the fill is another
    tenant's (the test's, outside the farm's work folder): one of the build's own is its build-fail."""
    with tenant(mounted):
        row, done = _verify(node, tmp_path / "farm", mounted / "work", FILLS, runner)
    assert row["outcome"] == "infra-error", (row, done.stdout[-3000:])
    assert "while its build ran" in row["reason"] and "MiB free" in row["reason"], row["reason"]
    assert done.returncode == 4, done.stdout[-2000:]


@pytest.mark.parametrize("runner", ["shell", "auto"])
def test_the_words_with_plenty_of_room_stay_the_kernels(
    node: SshNode, mounted: Path, tmp_path: Path, runner: str
) -> None:
    """Figure: a build that prints "No space left on device" on a disk with its room stays `build-fail`, exit 1."""
    row, done = _verify(node, tmp_path / "farm", mounted / "work", SAYS, runner)
    assert row["outcome"] == "build-fail", (row, done.stdout[-3000:])
    assert done.returncode == 1, done.stdout[-2000:]


def test_the_build_room_lines_are_read_as_the_looks() -> None:
    """Figure: the lowest room lines of the stage's output read as the look's own lines: 10 MiB
    free in the work folder is short, 1 GiB with its inodes is not; a line in the log is not read."""
    text = "@@farm rc=1\n@@farm build-room 10240 5000\n@@farm build-room 1048576 5000\n"
    lines = lowest_room(text)
    assert lines == ["10240 5000", "1048576 5000"]
    assert "work folder had 10 MiB free" in CellStages._short_of_room(lines)
    assert CellStages._short_of_room(lowest_room("@@farm build-room 1048576 5000\n")) == ""
    assert lowest_room("say @@farm build-room 1 1\n") == []
