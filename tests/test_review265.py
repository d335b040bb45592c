"""Review round 265: a file the node could not read back was sent as an empty one.

CI (b3f32bb, red-team 247's shell-runner case) found it: a kernel took every bit of its node's
`cells/` folder during its run while another cell's inspect, on the same node, had just ended; that
cell's disassembly was read back through the folder at mode 000, sent as an empty frame (frames.emit:
"an empty frame for a missing file"), and the victim kernel was inspect-fail "required instructions
missing: ret (0 < 1)", blamed for the other kernel's harm. The python runner's frame() did the same
on any error opening the file. Now a file that is there but cannot be read (its own mode, a folder
above it without its search bit, an error reading it) ends its frame with `@@farm-frame-unread`, and
the farm's reader says so as an infra error naming the file's tag (no evidence, retried); a missing
file, a link and a FIFO stay empty frames, as before.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import InfraError
from orchestrator.run.frames import FrameReader, emit, new_token

UID = 54321  # no entry in the password database: not root, owns nothing here
SETPRIV = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
ROOT = Path(__file__).resolve().parent.parent


def _python_frames(token: str, files: list[tuple[str, str]], ends: bool) -> bytes:
    """node/stage_flow.frame's output for FILES (tag, path), run as a login that is not root, by the
    machine's python3 (the farm's own is in root's home)."""
    code = (
        "import sys; from orchestrator.run import noderunner\n"
        f"for tag, path in {files!r}: noderunner.frame({token!r}, tag, path, 100, {ends!r})\n"
        "sys.stdout.flush()"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.run([*SETPRIV, "/usr/bin/python3", "-c", code], capture_output=True, env=env, check=True).stdout


def _shell_frames(token: str, files: list[tuple[str, str]], ends: bool) -> bytes:
    script = "; ".join(emit(token, tag, path, 100, ends) for tag, path in files)
    return subprocess.run([*SETPRIV, "sh", "-c", script], capture_output=True, check=True).stdout


SENDERS = {"shell": _shell_frames, "python": _python_frames}


def _read(token: str, out: bytes, tags: list[str]) -> tuple[dict[str, bytes], InfraError | None]:
    got = {tag: bytearray() for tag in tags}
    reader = FrameReader(token, {tag: got[tag].extend for tag in tags}, "n")
    for at in range(0, len(out), 7):  # in small pieces: a trailer cut across chunks
        reader.feed(out[at : at + 7])
    try:
        reader.finish()
    except InfraError as error:
        return {t: bytes(d) for t, d in got.items()}, error
    return {t: bytes(d) for t, d in got.items()}, None


@pytest.fixture
def cell() -> Iterator[Path]:
    """A cell's folder under a `cells/` folder, as a login that is not root owns them, with its dump
    (under /tmp: pytest's own folders are root's alone, a login that is not root reaches nothing there)."""
    top = Path(tempfile.mkdtemp(prefix="rv265-"))
    top.chmod(0o755)
    folder = top / "node" / "cells" / "1-abc"
    folder.mkdir(parents=True)
    (folder / "inspect.txt").write_text("ret\n")
    for path in (top / "node" / "cells", folder, folder / "inspect.txt"):
        os.chown(path, UID, UID)
    yield folder
    folder.parent.chmod(0o755)
    shutil.rmtree(top)


@pytest.mark.parametrize("ends", [False, True])
@pytest.mark.parametrize("sender", sorted(SENDERS))
def test_a_dump_behind_a_folder_taken_at_mode_000_is_no_empty_dump(cell: Path, sender: str, ends: bool) -> None:
    """Before: the dump came back as 0 bytes (the victim's "ret (0 < 1)"), no error. Figure: an infra
    error naming the dump; the same files with the folder's bits back read whole."""
    token = new_token()
    files = [("dump", str(cell / "inspect.txt"))]
    cell.parent.chmod(0)
    try:
        got, error = _read(token, SENDERS[sender](token, files, ends), ["dump"])
    finally:
        cell.parent.chmod(0o755)
    assert error is not None and "could not read back the cell's dump" in str(error), (got, error)
    got, error = _read(token, SENDERS[sender](token, files, ends), ["dump"])
    assert error is None and got["dump"].endswith(b"ret\n"), (got, error)


@pytest.mark.parametrize("sender", sorted(SENDERS))
def test_a_file_at_mode_000_is_unread_and_a_missing_one_or_a_link_is_empty(cell: Path, sender: str) -> None:
    """Before: a dump at mode 000 was an empty frame, as a missing file is. Figure: a dump at mode 000
    that is not the login's (root's, here) is an infra error naming it alone; a missing log and a link in a
    file's place stay empty frames. (One the login owns gets its read bit back and is read: review 274.)"""
    token = new_token()
    os.chown(cell / "inspect.txt", 0, 0)
    (cell / "inspect.txt").chmod(0)
    (cell / "stdout.txt").symlink_to(cell / "inspect.txt")
    files = [
        ("dump", str(cell / "inspect.txt")),
        ("log", str(cell / "build.log")),
        ("stdout", str(cell / "stdout.txt")),
    ]
    got, error = _read(token, SENDERS[sender](token, files, False), ["dump", "log", "stdout"])
    assert error is not None and "the cell's dump (" in str(error), (got, error)
    assert got["dump"].strip(b"\0") == b"" and got["log"] == got["stdout"] == b"", got  # padding, if any
    (cell / "inspect.txt").chmod(0o644)
    got, error = _read(token, SENDERS[sender](token, files, False), ["dump", "log", "stdout"])
    assert error is None and got == {"dump": b"ret\n", "log": b"", "stdout": b""}, (got, error)


@pytest.mark.parametrize("sender", sorted(SENDERS))
def test_a_file_of_the_logins_own_at_mode_000_gets_its_read_bit_back_and_is_read(cell: Path, sender: str) -> None:
    """Review 274. Before (since 265): a file the login owns at mode 000 (a build's `chmod 0 build.log`)
    was "could not read back", the node's infra-error, tried three times and counted against the node for
    the job's own doing. Figure: its owner's read bit back, read whole, no error."""
    token = new_token()
    (cell / "inspect.txt").chmod(0)
    got, error = _read(token, SENDERS[sender](token, [("dump", str(cell / "inspect.txt"))], False), ["dump"])
    assert error is None and got["dump"] == b"ret\n", (got, error)
    assert (cell / "inspect.txt").stat().st_mode & 0o400, oct((cell / "inspect.txt").stat().st_mode)
