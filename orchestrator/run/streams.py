"""A kernel's stdout or stderr, read once, whole: markers, hash, and a bounded copy.

A verbose kernel may print its pass marker after megabytes of debug output, so
markers are matched over the *whole* stream as it is read, never only over the
copy that is kept. Markers are user regexes and the output is untrusted, so
they run on RE2 (google-re2), whose matching time is linear in the input:
no pattern can make a hostile line hang the farm.

Markers are matched line by line (`^` and `$` anchor at each line). A line
longer than MAX_LINE bytes is never matched: it is too long to be a marker,
and matching it in pieces would let `$` match where a piece was cut. Markers
named `anywhere` (CUDA's error words: cuda_errors.py, which fail a run wherever
printed and hold no anchor) are searched in such a line too, in overlapping
pieces: a kernel's `CUDA error: %s` printed without a newline before a long
result dump on the same line had passed (a red-team finding). The kept
copy is the stream's first and last `cap / 2` bytes with one elision line
between them; the full size and the full stream's sha256 are recorded, and
where the cut was, so a page can say which bytes it does not show.

Memory is bounded by `cap` + MAX_LINE + one chunk, whatever the stream's size.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import re2

MAX_LINE = 64 * 1024
LAST_LINE_CHARS = 240  # of the last non-empty line, for reasons
OVERLAP = 256  # bytes of an over-long line searched again with its next piece: words a chunk cut
QUOTE_BEFORE = 80  # bytes of a matched line before the match that its quote keeps (shown)


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print parse errors on stderr itself
    return options


@functools.lru_cache(maxsize=1024)  # a job's markers, compiled once per run, not twice per cell
def compile_marker(pattern: str) -> re2._Regexp:
    """A marker as RE2 compiles it, for bytes, with `^`/`$` at line ends; raises
    ValueError naming what RE2 rejects (look-arounds, back-references...). The
    compiled pattern is immutable: threads share it."""
    try:
        return re2.compile(("(?m)" + pattern).encode("utf-8"), _options())
    except re2.error as err:
        reason = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else str(err)
        raise ValueError(reason) from None


@dataclass
class ScanResult:
    """What one read of a stream saw."""

    size: int = 0
    sha256: str = ""
    kept: bytes = b""  # head + elision line + tail, or the whole stream when it fits
    cut: tuple[int, int] | None = None  # [start, end) byte offsets left out of `kept`
    lines: int = 0
    matches: dict[str, int] = field(default_factory=dict)  # marker name -> first matching line (1-based)
    texts: dict[str, str] = field(default_factory=dict)  # marker name -> that line, decoded, bounded (a reason's)
    last_line: str = ""  # the last non-empty line, decoded, at most LAST_LINE_CHARS
    long_lines: int = 0  # lines longer than MAX_LINE, never read for a marker (said where one is missing)


class StreamScan:
    """Feed a stream's bytes in chunks; `finish()` returns what it saw."""

    def __init__(
        self, markers: dict[str, str], cap: int, anywhere: frozenset[str] = frozenset(), skip: str = ""
    ) -> None:
        self._markers = {name: compile_marker(p) for name, p in markers.items() if p}
        # a launcher's own lines (kernel_calls.launcher_lines): never a marker's, but for `anywhere` ones
        self._skip = compile_marker(skip) if skip else None
        self._anywhere = frozenset(anywhere & set(self._markers))  # also searched in lines longer than MAX_LINE
        self._carry = b""  # the last OVERLAP bytes of the over-long line being skipped
        self._half = max(cap // 2, 1)
        self._hash = hashlib.sha256()
        self._size = 0
        self._head = bytearray()
        self._tail = bytearray()
        self._partial = bytearray()
        self._skipping = False  # inside a line already longer than MAX_LINE: dropped up to its newline
        self._lines = 0
        self._long_lines = 0
        self._matches: dict[str, int] = {}
        self._texts: dict[str, str] = {}

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._hash.update(chunk)
        self._size += len(chunk)
        room = self._half - len(self._head)
        if room > 0:
            self._head += chunk[:room]
        self._tail += chunk
        if len(self._tail) > self._half:
            del self._tail[: len(self._tail) - self._half]
        self._partial += chunk
        if self._skipping:
            end = self._partial.find(b"\n")
            if end < 0:
                self._long(bytes(self._partial))
                self._partial.clear()
                return
            self._long(bytes(self._partial[:end]), ended=True)
            del self._partial[: end + 1]
            self._lines += 1
            self._skipping = False
            self._carry = b""
        cut = self._partial.rfind(b"\n")
        if cut >= 0:
            self._block(bytes(self._partial[: cut + 1]))
            del self._partial[: cut + 1]
        if len(self._partial) > MAX_LINE:  # a line too long to be a marker: memory stays bounded
            self._long(bytes(self._partial))
            self._partial.clear()
            self._skipping = True
            self._long_lines += 1

    def _long(self, piece: bytes, ended: bool = False) -> None:
        """A piece of the over-long line being skipped (its number self._lines + 1): the
        `anywhere` markers are searched in it, after the last OVERLAP bytes of the piece before.
        A `\b` is judged where the line's bytes meet, never where a piece was cut: a match at the
        carry's first byte was judged in the window before, beside its real neighbour, and one that
        ends at the window's end waits for the next piece (`ended`: the line's end), else a word
        that is not CUDA's (`xcudaErrorNoDevice`, `cudaErrorInvalidPcie`) counted where the
        transport cut the output, the same bytes failing or passing by chunking (review 124)."""
        window = self._carry + piece
        start = 1 if self._carry else 0
        self._carry = window[-OVERLAP:]
        for name in self._anywhere - self._matches.keys():
            found = self._markers[name].search(window, start)
            if found is not None and (ended or found.end() < len(window)):
                self._matches[name] = self._lines + 1
                at = found.start()
                self._texts[name] = shown(window[at : found.end() + 80], window[max(at - QUOTE_BEFORE, 0) : at])

    def _block(self, block: bytes) -> None:
        """Whole lines, each ending in a newline. A marker is searched in the
        block at once (fast); only a hit is confirmed line by line, so a match
        that spans lines never counts."""
        if len(block) > MAX_LINE + 1:  # a long line that came whole with its newline, never skipped
            self._long_lines += sum(len(line) > MAX_LINE for line in block.split(b"\n")[:-1])
        for name, marker in self._markers.items():
            if name in self._matches or marker.search(block) is None:
                continue
            number = self._lines
            for line in block.split(b"\n")[:-1]:
                number += 1
                if name not in self._anywhere and self._skip is not None and self._skip.match(line):
                    continue
                if (len(line) <= MAX_LINE or name in self._anywhere) and (found := marker.search(line)):
                    self._matches[name] = number
                    self._texts[name] = shown(line[found.start() :], line[: found.start()])
                    break
        self._lines += block.count(b"\n")

    def finish(self) -> ScanResult:
        if self._skipping:
            self._long(b"", ended=True)  # the stream's end ends the line: a match its last piece held back
            self._lines += 1
        elif self._partial:
            self._block(bytes(self._partial) + b"\n")
        self._partial.clear()
        if self._size <= 2 * self._half:
            kept = bytes(self._head) + bytes(self._tail[len(self._tail) - (self._size - len(self._head)) :])
            cut = None
        else:
            start, end = len(self._head), self._size - len(self._tail)
            kept = bytes(self._head) + elision(start, end, self._size) + bytes(self._tail)
            cut = (start, end)
        return ScanResult(
            size=self._size,
            sha256=self._hash.hexdigest(),
            kept=kept,
            cut=cut,
            lines=self._lines,
            matches=dict(self._matches),
            texts=dict(self._texts),
            last_line=last_line(bytes(self._tail)),
            long_lines=self._long_lines,
        )


def shown(rest: bytes, before: bytes = b"") -> str:
    """A matched line as quoted in a reason: the carriage-return segment the match begins `rest`
    in, from the last carriage return of `before` (the line up to the match). The whole line's last
    segment had quoted "standin: PASS" for `an illegal memory access was encountered\rstandin: PASS`.
    At most QUOTE_BEFORE bytes before the match: a long segment's first 240 characters had quoted
    a result dump without the words matched (review 124)."""
    start = max(before.rfind(b"\r") + 1, len(before) - QUOTE_BEFORE)
    end = rest.find(b"\r")
    return last_line(before[start:] + (rest if end < 0 else rest[:end]))


def elision(start: int, end: int, size: int) -> bytes:
    """The line a kept copy holds where bytes [start, end) of `size` were cut (a build log's too:
    file_ends.py), which the masker finds it by (output_secrets.Masker.kept)."""
    return f"\n[farm: {end - start} bytes left out here (bytes {start} to {end} of {size})]\n".encode()


def last_line(data: bytes) -> str:
    """The last non-empty line of `data`, decoded and bounded, for a reason."""
    for line in reversed(data.splitlines()):
        text = line.decode("utf-8", "replace").strip()
        if text:
            return text if len(text) <= LAST_LINE_CHARS else text[: LAST_LINE_CHARS - 1] + "…"
    return ""


def scan(
    chunks: Iterable[bytes], markers: dict[str, str], cap: int, anywhere: frozenset[str] = frozenset()
) -> ScanResult:
    scanner = StreamScan(markers, cap, anywhere)
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner.finish()


def scan_bytes(
    data: bytes, markers: dict[str, str], cap: int = 1 << 20, anywhere: frozenset[str] = frozenset()
) -> ScanResult:
    return scan([data], markers, cap, anywhere)
