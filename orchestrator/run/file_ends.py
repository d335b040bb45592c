"""A build log kept as stdout and stderr are: its first and last `output_cap / 2` bytes, its size, its cut.

The node sends such a file as one frame (frames.emit / node's stage_flow.frame with `ends`): its
whole size in SIZE_DIGITS decimal digits, then the file where it fits, else only its first and last
halves, so a build that writes gigabytes of log ships no more than `output_cap` bytes, in the same
round trip as before, and the end of the log (nvcc's last errors, "N errors detected") is kept.
The size comes inside the frame, read by its length: no line the build printed can stand for it.

Slurm's stages cannot stream: there the stage's own job writes the same frame to a file beside the
log (`FRAMED`), and the farm reads that file, not the log, in the round trip it read the log in.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.errors import InfraError, NotReadBack, not_read_back
from orchestrator.run.frames import SIZE_DIGITS, FrameReader, emit, new_token
from orchestrator.run.streams import elision
from orchestrator.transport import Transport

FRAMED = ".farm-ends"  # Slurm: the frame of a file sent by its ends, beside it on the node
SLACK = 256  # bytes of a framed file past its frame's body: its header and end line


@dataclass
class KeptLog:
    """What the farm keeps of the file: `kept` holds the elision line where bytes `cut` of `size`
    were left out (streams.elision), as a stream's kept copy does."""

    kept: bytes
    size: int
    cut: tuple[int, int] | None


class FileEnds:
    """The sink of an `ends` frame: fed its body in chunks, `finish()` says what it held."""

    def __init__(self, limit: int) -> None:
        self._half = limit // 2
        self._data = bytearray()

    def feed(self, chunk: bytes) -> None:
        # the frame's body is at most its size and both halves: no more is kept, whatever came
        self._data += chunk[: max(SIZE_DIGITS + 2 * self._half - len(self._data), 0)]

    def finish(self) -> KeptLog:
        digits, body = bytes(self._data[:SIZE_DIGITS]), bytes(self._data[SIZE_DIGITS:])
        size = int(digits) if len(digits) == SIZE_DIGITS and digits.isdigit() else len(body)
        if size <= 2 * self._half or len(body) != 2 * self._half:
            return KeptLog(body, len(body), None)  # whole (or not as the node sends a cut one: shown as came)
        start, end = self._half, size - self._half
        return KeptLog(body[:start] + elision(start, end, size) + body[start:], size, (start, end))


Files = Sequence[tuple[str, str, int, Callable[[bytes], None]]]


def with_framed(script: str, files: Files, ends: Sequence[str]) -> tuple[str, str]:
    """Slurm: the stage's script, then shell in its own job writing each `ends` file's frame beside
    it (the job's stdout comes back as text through srun: no frame can travel in it); and the
    frames' token, for read_back."""
    token = new_token()
    # removed first: a link a build's leftover put there is not written through
    framed = "".join(
        f"; rm -f {copy}; {{ {emit(token, tag, path, limit, True)}; }} > {copy}"
        for tag, path, limit, _ in files
        if tag in ends
        for copy in [shlex.quote(path + FRAMED)]
    )
    return script + framed, token


def read_back(t: Transport, token: str, files: Files, ends: Sequence[str]) -> None:
    """Slurm: each file, in a round trip of its own; an `ends` one as its framed copy, read by length.
    Each is read as frames.emit reads it on the node (Transport.stream): a regular file only, never
    through a link nor from a FIFO, and no more than is kept; one there but unreadable is no empty
    file (NotReadBack: a kernel's stdout unread had read as "no pass marker", red-team 268)."""
    for tag, path, limit, sink in files:
        got = 0
        if tag not in ends:
            try:
                for chunk in t.stream(path, limit):
                    sink(chunk[: max(limit - got, 0)])
                    got += len(chunk)
            except NotReadBack as err:  # named as the streaming runners' frames name it (frames.py)
                raise not_read_back(t.name, [tag]) from err
            continue
        reader = FrameReader(token, {tag: sink}, t.name)
        bound = SIZE_DIGITS + limit + SLACK  # a copy grown past its frame is cut: finish() says so
        for chunk in t.stream(path + FRAMED, bound + 1):
            reader.feed(chunk[: max(bound - got, 0)])
            got += len(chunk)
            if got > bound:  # not the copy the job wrote (a build's leftover grew it): read no further
                break
        reader.finish()
        if tag not in reader.frames:
            raise InfraError(f"node {t.name!r}: the stage's job wrote no copy of its {tag} to send back")
