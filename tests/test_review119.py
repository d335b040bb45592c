"""Review round 119: a node out of processes, told as such on every attempt, on real sshd nodes.

Round 116 read a build log's failed fork ("vfork: Resource temporarily unavailable") as the node
out of processes. Its retry, failing the same way, said something vaguer or wrong: the resident
runner's "the stage's shell ... ended with status 1 ... BlockingIOError(11 ...)" (its own spawn of
the stage's shell failing), the shell runner's "staged inputs altered on the node (sources) again"
(its check's sha256sum never started: an empty digest read as an altered input, which reads as
tampering) or "extracting sources ... failed: /bin/sh: 1: Cannot fork" (its re-staging's).
The final verdict an operator reads must say out of processes.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import descendants
from nodes import CARDS, SshNode, running_node
from test_redteam116 import NAME, midrun

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import EXIT_INFRA
from orchestrator.run import staging
from orchestrator.run.bundle import Bundle
from orchestrator.run.staging import StagingFailed
from orchestrator.transport import transport_for


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SshNode]:
    yield from running_node(NAME, tmp_path / "node", CARDS["t4"])


@pytest.fixture
def group(node: SshNode) -> Iterator[Path]:
    """A pids cgroup of the test's own; whatever is in it goes back to its parent after."""
    made = Path("/sys/fs/cgroup/pids") / f"rt119-{node.port}"
    if not made.parent.is_dir():
        made = Path("/sys/fs/cgroup") / f"rt119-{node.port}"  # cgroup v2
    made.mkdir()
    yield made
    (made / "pids.max").write_text("max")
    for pid in (made / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError):  # ended meanwhile
            (made.parent / "cgroup.procs").write_text(pid)
    made.rmdir()


# the resident runner and the shell runner were the vague ones (a python3 per cell already said it)
@pytest.mark.parametrize("runner", ["resident", "shell"], indirect=True)
@pytest.mark.usefixtures("runner")
def test_a_node_out_of_processes_says_so_on_its_last_attempt(node: SshNode, group: Path, tmp_path: Path) -> None:
    """Round 116's fault (the node's sshd and all under it in a pids cgroup at its limit while the
    first cell runs), kept through the next cell's retry. Before: its last attempt said "ended with
    status 1 ... BlockingIOError" (resident) or "staged inputs altered on the node (sources) again"
    (shell). Figure: both attempts of the next cell infra-error saying out of processes, exit 4."""

    def at_its_limit(_: Path) -> None:
        assert node.proc is not None
        for pid in [node.proc.pid, *(pid for pid, _ in descendants(node.proc.pid))]:
            with contextlib.suppress(OSError):  # ended meanwhile
                (group / "cgroup.procs").write_text(str(pid))
        (group / "pids.max").write_text((group / "pids.current").read_text().strip())

    code, rows, tries = midrun(node, tmp_path, at_its_limit)
    row = rows["after"]
    assert row["outcome"] == "infra-error", row["reason"]
    said = [t["error"] or "" for t in tries if t["variant"] == "after"]
    assert len(said) >= 2, said
    # each attempt says the node is out of processes, or that its sshd could not start a session for
    # the farm's check (review 118 asks the node itself): never tampering
    assert all("altered" not in error for error in said), said
    assert all("out of processes" in error or "cannot connect" in error for error in said), said
    assert "out of processes" in said[-1], said
    assert "out of processes" in row["reason"] and "pids.max" in row["reason"], row["reason"]
    assert code == EXIT_INFRA


def test_a_staging_that_cannot_fork_is_out_of_processes(node: SshNode, group: Path, tmp_path: Path) -> None:
    """The shell's staging script at a pids limit from its tar on (a `tar` on the node's PATH puts
    the script's shell and itself in the cgroup at its limit, then is the real tar, whose gzip then
    cannot start). Before: "extracting sources of k on n116 failed: tar: ... Cannot fork ...", no
    word of the limit. Figure: StagingFailed saying out of processes."""
    real = shutil.which("tar")
    assert real is not None
    tar = node.node_bin / "tar"
    tar.write_text(
        "#!/bin/sh\n"
        f"echo $PPID > {group}/cgroup.procs; echo $$ > {group}/cgroup.procs\n"
        f"cat {group}/pids.current > {group}/pids.max\n"
        f'exec {real} "$@"\n'
    )
    tar.chmod(0o755)
    source = tmp_path / "here" / "k.cu"
    source.parent.mkdir()
    source.write_text("int main() { return 0; }\n")
    sources = Bundle.of_files("sources of k", {"k.cu": source})
    work = tmp_path / "work"
    (work / "incoming").mkdir(parents=True)
    with (
        transport_for(NAME, NodeSpec(**node.farm_entry(work))) as transport,
        pytest.raises(StagingFailed) as failed,
    ):
        staging.ship(transport, str(work), [(sources, "")], tmp_path / "cache")
    assert "out of processes" in str(failed.value) and "pids.max" in str(failed.value), failed.value


@pytest.mark.parametrize(
    ("said", "node_words"),
    [
        # the resident runner's spawn.py, as a stage's error tells it
        (
            """farm runner: build stage: RuntimeError("cannot start sh -c: sh: BlockingIOError(11, """
            """'Resource temporarily unavailable')")""",
            "sh: BlockingIOError(11, 'Resource temporarily unavailable')",
        ),
        (
            "RuntimeError('cannot start sh -c: sh: BlockingIOError(11, \\'Resource temporarily unavailable\\')')",
            "sh: BlockingIOError(11, 'Resource temporarily unavailable')",
        ),
        ("/bin/sh: 1: eval: Cannot fork", "/bin/sh: 1: eval: Cannot fork"),  # the shell's own
        (
            "/bin/sh: 1: eval: /bin/sh: 1: eval: Cannot fork\nCannot fork",
            "/bin/sh: 1: eval: /bin/sh: 1: eval: Cannot fork",
        ),
        # EAGAIN of no spawn (a non-blocking read), or another errno: not the node's limit
        ("farm runner: BlockingIOError(11, 'Resource temporarily unavailable')", ""),
        ("sh: PermissionError(13, 'Permission denied')", ""),
    ],
)
def test_the_runners_own_fork_failure_words(said: str, node_words: str) -> None:
    from orchestrator.run.node_limits import forkless  # new in round 119

    assert forkless(said) == node_words
