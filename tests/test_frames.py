"""Files sent back inside a command's stdout (frames.py), through a real shell.

The kernel's bytes are untrusted: they may contain frame headers (even with the
right token), may lack a final newline, or the file may be cut while it is
sent; none of it may become control text or shift the stream."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import InfraError
from orchestrator.run.frames import FrameReader, emit, new_token


def _shell(script: str) -> bytes:
    return subprocess.run(["sh", "-c", script], capture_output=True, check=True).stdout


def _read(token: str, out: bytes, tags: list[str], seed: int) -> tuple[str, dict[str, bytes]]:
    got = {tag: bytearray() for tag in tags}
    reader = FrameReader(token, {tag: got[tag].extend for tag in tags}, "n")
    chunks = random.Random(seed)
    at = 0
    while at < len(out):
        size = chunks.choice([1, 2, 3, 17, 4096, 65536, 1 << 20])
        reader.feed(out[at : at + size])
        at += size
    return reader.finish(), {tag: bytes(data) for tag, data in got.items()}


def test_frames_carry_any_bytes_and_leave_control_text_alone(tmp_path: Path) -> None:
    token = new_token()
    forged = f"\n@@farm-frame {token} stdout 3\nabc\n@@farm-frame-end {token} stdout\n@@farm rc=0\n".encode()
    payload = bytes(random.Random(1).randrange(256) for _ in range(20_000)) + forged + b"no newline at the end"
    (tmp_path / "out").write_bytes(payload)
    (tmp_path / "empty").write_bytes(b"")
    script = "; ".join(
        [
            "echo '@@farm rc=7'",
            emit(token, "stdout", str(tmp_path / "out"), 1 << 40),
            "echo between",
            emit(token, "stderr", str(tmp_path / "empty"), 100),
            emit(token, "log", str(tmp_path / "missing"), 100),
            emit(token, "dump", str(tmp_path / "out"), 10),
            "echo '@@farm end'",
        ]
    )
    out = _shell(script)
    for seed in range(10):
        control, got = _read(token, out, ["stdout", "stderr", "log", "dump"], seed)
        assert got["stdout"] == payload
        assert got["stderr"] == b"" and got["log"] == b""  # a missing file is an empty frame
        assert got["dump"] == payload[:10]  # cut at its limit
        assert control.split() == ["@@farm", "rc=7", "between", "@@farm", "end"], control


def test_a_file_that_shrinks_while_it_is_sent_keeps_the_stream_aligned(tmp_path: Path) -> None:
    """The node pads a file that got shorter after it was measured: the frame is still
    exactly the size announced, so the next control line is still read as control."""
    token = new_token()
    path = tmp_path / "out"
    path.write_bytes(b"x" * 1000)
    size_then_shrink = emit(token, "stdout", str(path), 1 << 20).replace(
        "printf '\\n@@farm-frame", f": > {path}; printf '\\n@@farm-frame", 1
    )
    out = _shell(f"{size_then_shrink}; echo '@@farm 0'")
    control, got = _read(token, out, ["stdout"], 0)
    assert got["stdout"] == b"\0" * 1000
    assert "@@farm 0" in control


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda out: out[: len(out) - 30], id="ended-inside-a-frame"),
        pytest.param(lambda out: out.replace(b"-end ", b"-END "), id="end-line-wrong"),
    ],
)
def test_output_cut_short_is_an_infra_error(tmp_path: Path, cut) -> None:
    token = new_token()
    (tmp_path / "out").write_bytes(b"y" * 5000)
    out = cut(_shell(f"{emit(token, 'stdout', str(tmp_path / 'out'), 1 << 20)}; echo done"))
    with pytest.raises(InfraError, match="node 'n'"):
        _read(token, out, ["stdout"], 0)


def test_a_frame_the_farm_did_not_ask_for_is_refused(tmp_path: Path) -> None:
    token = new_token()
    (tmp_path / "f").write_bytes(b"z")
    out = _shell(emit(token, "secret", str(tmp_path / "f"), 10))
    with pytest.raises(InfraError, match="malformed frame header"):
        _read(token, out, ["stdout"], 0)


def test_a_file_sent_twice_is_refused(tmp_path: Path) -> None:
    """The farm sends each file once; a second frame with the same tag (a kernel
    that learnt the token and forged its own stdout) is an error, never evidence."""
    token = new_token()
    (tmp_path / "f").write_bytes(b"PASS\n")
    out = _shell(f"{emit(token, 'stdout', str(tmp_path / 'f'), 10)}; {emit(token, 'stdout', str(tmp_path / 'f'), 10)}")
    with pytest.raises(InfraError, match="stdout twice"):
        _read(token, out, ["stdout"], 0)
