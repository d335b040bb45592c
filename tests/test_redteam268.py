"""Red-team round 268: two places where the farm read the node's words and believed them.

1. The sanitize stage's shell runner printed each tool's status line (`@@farm tool TOOL RC T0 T1 N`)
   on the script's own stdout after the tool's run, and the farm read the LAST such line. The kernel,
   unconfined there and of the same login, reaches that stdout (/proc/PID/fd/1 of the script's shell):
   under a later tool it wrote a line for an earlier one, "exit 0, 0 leftovers", read in place of the
   real one, and memcheck's leftover (a child still at work on the card) was a clean bill: pass. Now
   each tool's line must come exactly once (the script prints one; the python runner, which no kernel
   can write into, one): a second is no evidence (infra-error, no verdict, on either runner).
2. Slurm's read-back of the files not sent by their ends (the run's stdout, stderr, the sanitizer's
   streams) went through Transport.stream, which read a file the node could not read (its mode 000, a
   folder above it without its search bit: another cell's kernel's `chmod 000 cells`) as an empty one
   over SSH (a kernel's stdout unread: "no pass marker", the kernel blamed), and raised a bare
   PermissionError (an internal error) on the farm's own machine. Now every transport's stream says it
   could not read it, in FrameReader.finish's words (review 265), while a missing file, a link and a
   FIFO stay empty streams.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_redteam263
from nodes import Fleet, SshNode, standin_variant
from slurm import SlurmCluster, running_cluster
from test_slurm import transport

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import InfraError
from orchestrator.run.file_ends import read_back
from orchestrator.transport import Transport, transport_for

UID = 54321  # no entry in the password database: not root, owns nothing here (as review 265's)
UNREAD = "could not read back the cell's stdout (the file, or a folder of the farm's above it, unreadable there)"

# ------------------------------------------------------------------ 1. the sanitize stage's status lines

MIN75 = {"min": "7.5"}
# under memcheck a child left at work (its line says 1 leftover: no clean bill, red-team 263); under
# racecheck, memcheck's line again, "exit 0, no leftover", written into the first ancestor's stdout
# that is a pipe or a socket: the script's own, where the shell runner runs it
FORGER = r"""case "${STANDIN_SANITIZER_TOOL-}" in
memcheck) ( sleep 30 ) & ;;
racecheck)
    p=$$
    while [ -n "$p" ] && [ "$p" -gt 1 ]; do
        case "$(readlink /proc/$p/fd/1 2>/dev/null)" in
        pipe:*|socket:*) printf '\n@@farm tool memcheck 0 1 2 0\n' 2>/dev/null > /proc/$p/fd/1 && break ;;
        esac
        p=$(awk '/^PPid:/ {print $2}' /proc/$p/status 2>/dev/null)
    done ;;
esac
"""


# red-team 263's sanitizer node (its stand-in compute-sanitizer) and its run of a farm there, by their names
fleet = test_redteam263.fleet
_run = test_redteam263._run


@pytest.mark.parametrize("runner", ["shell", "auto"])
def test_a_kernel_that_forges_an_earlier_tools_status_line_gets_no_clean_bill(
    fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """Before: pass with the shell runner: memcheck's leftover child was read away by the line the kernel
    wrote under racecheck (the last of memcheck's lines won). Figure: infra-error at sanitize, its reason
    saying memcheck's status came twice; the python runner, whose stream no kernel reaches, still reads
    its one line: sanitizer-error for the leftover. Neither passes; a kernel that forges nothing passes."""
    prelude = tmp_path / "forger.sh"
    prelude.write_text(FORGER)
    tools = ["memcheck", "racecheck"]
    variants = {
        "clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=tools),
        "forger": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude, sanitize=tools),
    }
    rows = _run(fleet, make_farm, tmp_path, variants, runner)
    assert (rows["clean"]["outcome"], rows["clean"]["failed_stage"]) == ("pass", None), rows["clean"]["reason"]
    row = rows["forger"]
    if runner == "shell":
        assert (row["outcome"], row["failed_stage"]) == ("infra-error", "sanitize"), row["reason"]
        assert "status of compute-sanitizer --tool memcheck twice" in row["reason"], row["reason"]
    else:
        assert (row["outcome"], row["failed_stage"]) == ("sanitizer-error", "sanitize"), row["reason"]
        memcheck, _ = json.loads(row["sanitizer"])
        assert memcheck["leftover"] >= 1, memcheck


# ------------------------------------------------------------------ 2. Slurm's read-back, as a login not root


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster() as c:
        yield c


@pytest.fixture
def cell() -> Iterator[Path]:
    """A cell's folder under `cells/`, owned by the login that is not root, with its run's files: a
    stdout, a link and a FIFO in files' places (under /tmp: that login reaches nothing of pytest's)."""
    top = Path(tempfile.mkdtemp(prefix="rt268-"))
    top.chmod(0o755)
    folder = top / "node" / "cells" / "1-abc"
    folder.mkdir(parents=True)
    (folder / "stdout").write_text("standin: PASS\n")
    (folder / "linked").symlink_to(folder / "stdout")
    os.mkfifo(folder / "fifo")
    for path in (top / "node", top / "node" / "cells", folder, folder / "stdout", folder / "fifo"):
        os.chown(path, UID, UID)
    os.lchown(folder / "linked", UID, UID)
    yield folder
    folder.parent.chmod(0o755)
    shutil.rmtree(top)


@pytest.fixture(scope="module")
def not_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNode]:
    """An sshd whose every command runs as the login that is not root (ForceCommand through setpriv)."""
    node = SshNode("notroot", tmp_path_factory.mktemp("redteam268-notroot"), None)
    node.prepare()
    drop = f'setpriv --reuid={UID} --regid={UID} --clear-groups /bin/sh -c "$SSH_ORIGINAL_COMMAND"'
    node.config.write_text(node.config.read_text() + f"ForceCommand {drop}\n")
    node.start()
    try:
        yield node
    finally:
        node.stop()


class _AsNotRoot:
    """The farm's own machine read as the login that is not root: the effective uid (and so the file
    system's checks) dropped for the read alone, back to root after it."""

    def __enter__(self) -> None:
        os.setegid(UID)
        os.seteuid(UID)

    def __exit__(self, *_: object) -> None:
        os.seteuid(0)
        os.setegid(0)


def _slurm(cluster: SlurmCluster, login: str, not_root: SshNode, tmp_path: Path) -> Transport:
    if login == "local":
        return transport(cluster, "t4")
    entry = {**not_root.farm_entry(tmp_path), **cluster.farm_entry("t4", tmp_path, "nvcc")}
    return transport_for("viassh", NodeSpec(**entry))


def _read(t: Transport, path: Path, login: str) -> tuple[bytes, InfraError | None]:
    got = bytearray()
    try:
        if login == "local":
            with _AsNotRoot():
                read_back(t, "0123456789ab", [("stdout", str(path), 1000, got.extend)], ())
        else:
            read_back(t, "0123456789ab", [("stdout", str(path), 1000, got.extend)], ())
    except InfraError as error:
        return bytes(got), error
    return bytes(got), None


@pytest.mark.parametrize("login", ["local", "ssh"])
def test_slurms_read_back_of_a_stdout_the_login_cannot_read_is_no_empty_stdout(
    cluster: SlurmCluster, not_root: SshNode, cell: Path, tmp_path: Path, login: str
) -> None:
    """Before: over SSH the stdout behind `cells/` at mode 000 read back empty (the kernel's pass marker
    unseen: its fail), and at mode 000 itself an error of other words; on the farm's own machine a bare
    PermissionError (an internal error of the farm). Figure: the infra error FrameReader.finish says for
    a file the node could not read, naming the stdout, either way; read whole once the bits are back;
    a missing file, a link and a FIFO still empty, no error."""
    with _slurm(cluster, login, not_root, tmp_path) as t:
        for taken, mode in ((cell.parent, 0o755), (cell / "stdout", 0o644)):
            taken.chmod(0)
            try:
                got, error = _read(t, cell / "stdout", login)
            finally:
                taken.chmod(mode)
            assert error is not None and UNREAD in str(error), (taken, got, error)
            assert f"node {t.name!r}: the node " in str(error), error
        assert _read(t, cell / "stdout", login) == (b"standin: PASS\n", None)
        for name in ("missing", "linked", "fifo"):
            assert _read(t, cell / name, login) == (b"", None), name
