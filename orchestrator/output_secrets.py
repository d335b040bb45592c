"""Secrets a kernel or a build printed, masked as *** in every copy of its output the farm keeps.

A node's `env:` carries what operators hand its commands (license tokens, proxy passwords,
HF_TOKEN, NGC_API_KEY), and every build and kernel runs with it: one that printed its
environment (`env`, a crash handler's dump, a build log echoing a command line) put those values
on its cell's page, in the JSON and JUnit exports and in `farm show` (red-team round 105). The
store's own URL password reaches the output of none, but is masked too where it appears.

What is masked: the values of a node's `env:` entries whose names read as a credential (a part
of the name, split at `_`, that is KEY, AUTH, PAT or holds TOKEN, SECRET, PASSWORD, PASSWD,
PASSPHRASE, CREDENTIAL, APIKEY, but not a socket's path: a last part SOCK or SOCKET, as
SSH_AUTH_SOCK), those farm.yaml's `secret_env:` names, a password written into
any value's URL (a proxy's `http://user:password@host`), the database URL's secrets, and each
line of the nodes' key files (key_file_secrets). A value shorter than MIN_CHARS is never masked:
`1`, `true` or `a100` would mangle every line that holds them, and a credential that short protects
nothing.

Where: the records a run stores (cell_work.py), never the stream as it is read. The markers and
metrics are judged on what the kernel really printed (a masked copy could make or break a PASS
marker's match), the sizes, sha256 and cuts say what it printed too; only the copies kept for
people to read, and any text quoting them (reasons, stage details, the last stderr line), are
masked. Masking whole kept copies, not chunks, means no value is split across a chunk's edge;
the one edge left is the cut of a long stream, where the piece of a value each side of it is
masked as well. The count (masked_note) is of the kept copies: a cut stream's middle is never
stored, so nothing in it can leak, and the note says its bytes were not counted.

A value spanning lines is masked line by line, its newlines kept: reasons cite lines by their
number in what the kernel printed (classify/), and the stored copy keeps each at that number.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from orchestrator.store.url_secrets import url_secrets

MASK = "***"
MIN_CHARS = 6  # shorter values are not masked (README)
EDGE_CHARS = 4  # the least of a value's piece at a cut that is masked: fewer match too much by chance
_SECRET_PART = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|APIKEY")
_SECRET_WORD = frozenset({"KEY", "AUTH", "PAT", "PASS", "PW"})
# a socket's path (SSH_AUTH_SOCK, GPG_AGENT_SOCK) is where an agent listens, not a credential: masked,
# every path under /tmp or /run that shares its prefix came out as *** in a kernel's output
_SOCKET_WORD = frozenset({"SOCK", "SOCKET"})
# columns that name or identify, never quote output: masking them would corrupt the record's identity
_IDENTITY = frozenset(
    {"run_id", "kernel", "variant", "node", "device", "gpu_uuid", "sources", "dependencies", "identity"}
    | {"source_sha256", "binary_sha256", "stdout_sha256", "stderr_sha256", "build_key", "markers", "output_cuts"}
)
_OUTPUT = frozenset({"stdout", "stderr", "build_log"})  # what the count is of: the output as kept
R = TypeVar("R")


def secret_name(name: str) -> bool:
    """Whether an environment variable's name reads as a credential's (CUDA_VISIBLE_DEVICES and
    KEYBOARD do not; NGC_API_KEY, AWS_ACCESS_KEY_ID, HF_TOKEN and MY_AUTH do; SSH_AUTH_SOCK, a
    socket's path, does not)."""
    parts = name.upper().split("_")
    if parts[-1] in _SOCKET_WORD:
        return False
    return any(part in _SECRET_WORD or _SECRET_PART.search(part) for part in parts)


def env_secrets(env: Mapping[str, str], declared: Iterable[str] = (), plain: Iterable[str] = ()) -> list[str]:
    """The values of `env` to mask: its credential-named and `declared` entries, and any URL's password.

    `plain` (the node's `plain_env:`) are names the matcher reads as a credential's that the
    operator says are not: their values are shown, though a URL's password in them is still masked."""
    marked, shown = set(declared), set(plain)
    found: list[str] = []
    for name, value in env.items():
        if name in marked or (secret_name(name) and name not in shown):
            found.append(value)
        elif "://" in value or "=" in value:
            found += url_secrets(value)
    return found


class Masker:
    """Replaces each secret, as bytes and as text, with MASK, and counts what it replaced."""

    def __init__(self, secrets: Iterable[str], keys: Iterable[str] = ()) -> None:
        # KEYS (key files' text) are matched a line at a time against a set: in the alternation below,
        # 64 nodes' key lines made every stored record cost 45 ms of CPU where it had cost 8 (the lent H100)
        self._key_lines = frozenset(
            line.strip().encode("utf-8", "surrogateescape")
            for text in keys
            for line in text.split("\n")
            if len(line.strip()) >= MIN_CHARS
        )
        whole = {s for s in secrets if len(s) >= MIN_CHARS}
        # a multi-line value's lines, each alone: a reason quotes one line (the last stderr line), never
        # the whole value; a line too short to mask alone is masked only inside the value
        pieces = {line.strip() for s in whole if "\n" in s for line in s.split("\n")}
        values = sorted(whole | {p for p in pieces if len(p) >= MIN_CHARS}, key=len, reverse=True)
        self._values = [v.encode("utf-8", "surrogateescape") for v in values]
        # longest first: where one value holds another, the whole of it is masked
        self._bytes = re.compile(b"|".join(map(re.escape, self._values))) if values else None
        self._text = re.compile("|".join(map(re.escape, values))) if values else None
        self.count = 0

    def __bool__(self) -> bool:
        return self._bytes is not None or bool(self._key_lines)

    def fresh(self) -> Masker:
        """This masker, its count at 0, its sets and patterns shared: a record's count is its own; building
        them again made a 1 KiB record cost 73 µs of CPU at 64 nodes' key files, 6 µs so (bench/masker_keys.py)."""
        twin = copy.copy(self)
        twin.count = 0
        return twin

    def data(self, data: bytes) -> bytes:
        if not data:
            return data
        if self._key_lines:
            data = self._key_data(data)
        if self._bytes is None:
            return data
        masked, n = self._bytes.subn(lambda m: _masked_bytes(m.group()), data)
        self.count += n
        return masked

    def text(self, text: str) -> str:
        if not text:
            return text
        if self._key_lines:
            text = self._key_data(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")
        if self._text is None:
            return text
        masked, n = self._text.subn(lambda m: _masked_text(m.group()), text)
        self.count += n
        return masked

    def _key_data(self, data: bytes) -> bytes:
        """Each line of DATA that is a key file's line (its blanks aside) as MASK, its newline kept."""
        lines = data.split(b"\n")
        hits = [i for i, line in enumerate(lines) if line.strip() in self._key_lines]
        if not hits:
            return data
        for i in hits:
            lines[i] = MASK.encode()
        self.count += len(hits)
        return b"\n".join(lines)

    def value(self, value: Any) -> Any:
        """A column's value with its text masked, however deep in lists and mappings (keys kept)."""
        if isinstance(value, bytes):
            return self.data(value)
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.value(v) for key, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value

    def kept(self, kept: bytes, cut: tuple[int, int] | list[int] | None, size: int) -> bytes:
        """A stream's kept copy (streams.py), or a build log's (file_ends.py, the farm's notes after
        its tail): where it was cut, its head and tail masked apart, with a value's piece each side
        of the cut too (its rest is in the bytes left out)."""
        from orchestrator.run.streams import elision  # not at import: the config's loading needs no RE2

        if not cut or self._bytes is None:
            return self.data(kept)
        start, end = int(cut[0]), int(cut[1])
        note = elision(start, end, size)
        if kept[start : start + len(note)] != note:  # not a copy cut there: masked whole
            return self.data(kept)
        head, tail = kept[:start], kept[start + len(note) :]
        return self._side(head, at_end=True) + note + self._side(tail, at_end=False)

    def _side(self, data: bytes, at_end: bool) -> bytes:
        """One side of a cut. Its piece of a value at the cut is found in the bytes as printed, before
        masking: a multi-line value's first line, masked alone, would hide that the bytes after it
        are the start of its second (`***\nbet`)."""
        assert self._bytes is not None
        at = self._edge(data, at_end)
        moved = True
        while moved:  # a whole value across the piece's start goes with it, else its part outside stays
            moved = False
            for found in self._bytes.finditer(data):
                if found.start() < at < found.end():
                    at, moved = (found.start() if at_end else found.end()), True
                    self.count += 1
                    break
        rest, piece = (data[:at], data[at:]) if at_end else (data[at:], data[:at])
        if piece:
            self.count += 1
            piece = _masked_bytes(piece)
        rest = self.data(rest)
        return rest + piece if at_end else piece + rest

    def _edge(self, data: bytes, at_end: bool) -> int:
        """Where the longest piece of a value (at least EDGE_CHARS of it) at the cut's side of `data`
        begins (at_end) or ends, else the cut itself."""
        longest = 0
        for value in self._values:  # each value's own longest first: a piece is at most its length less one
            for n in range(min(len(value) - 1, len(data)), max(longest, EDGE_CHARS - 1), -1):
                if data.endswith(value[:n]) if at_end else data.startswith(value[-n:]):
                    longest = n
                    break
        return len(data) - longest if at_end else longest

    def record(self, record: R) -> R:
        """A store record (store/records.py) with every column that may quote output masked."""
        if self._bytes is None:
            return record
        changes: dict[str, Any] = {}
        for field in dataclasses.fields(record):  # type: ignore[arg-type]
            name = field.name
            value = getattr(record, name)
            if name in _IDENTITY or value is None:
                continue
            counted = self.count
            cut = (getattr(record, "output_cuts", None) or {}).get(name) if name in _OUTPUT else None
            if cut:  # a build log's cut carries its size (file_ends.py); a stream's is in its column
                masked = self.kept(value, cut[:2], cut[2] if len(cut) > 2 else getattr(record, f"{name}_size"))
            else:
                masked = self.value(value)
            if name not in _OUTPUT:  # a reason quoting a line is the same occurrence again
                self.count = counted
            if masked != value:
                changes[name] = masked
        return dataclasses.replace(record, **changes) if changes else record  # type: ignore[type-var]


def _masked_text(found: str) -> str:
    """MASK for each line's piece of what matched, its newlines kept: a reason cites lines by their
    number in what the kernel printed (classify/), so the stored copy keeps every line at its number."""
    return "\n".join(MASK if piece else "" for piece in found.split("\n"))


def _masked_bytes(found: bytes) -> bytes:
    return b"\n".join(MASK.encode() if piece else b"" for piece in found.split(b"\n"))


@functools.lru_cache(maxsize=8)
def _farm_secrets(
    nodes: tuple[tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...]], ...], url: str
) -> tuple[str, ...]:
    found = [secret for env, declared, plain in nodes for secret in env_secrets(dict(env), declared, plain)]
    return tuple(dict.fromkeys([*found, *url_secrets(url)]))


KEY_FILE_CHARS = 1 << 16  # a key file is a few KiB: a path given as one that is not is read no further


def key_file_secrets(paths: Iterable[str]) -> list[str]:
    """The text of each key file of PATHS that can be read (one value each, masked line by line: a
    PEM body's lines): a second guard beside the node's Landlock (run/farm_secrets.py), for a kernel
    that read one unconfined, as the shell runner or a node without Landlock leaves it."""
    found = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                found.append(handle.read(KEY_FILE_CHARS).decode("utf-8", "surrogateescape"))
        except OSError:
            continue
    return found


def farm_masker(spec: Any, database_url: str, keys: tuple[str, ...] = ()) -> Masker:
    """A fresh Masker (its count at 0) of every node's secrets and the database URL's, and KEYS (the
    text of the nodes' key files: key_file_secrets).

    Every node's, not only the cell's own: a value one node's operator marked secret is no less
    secret where another node's kernel printed it."""
    nodes = tuple(
        (tuple(sorted(node.env.items())), tuple(node.secret_env), tuple(node.plain_env))
        for node in spec.nodes.values()
        if node.env
    )
    return Masker(_farm_secrets(nodes, database_url), keys)


def masked_note(count: int, cuts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stage_details entry that tells a reviewer output was masked, and how often.

    The count is of the output kept. A long stream's cut middle is never stored (nothing in it can
    leak) and no copy of it is left to count in once its markers were matched, so where a stream
    was cut the note says its count leaves those bytes out rather than understating in silence."""
    said = "occurrence" if count == 1 else "occurrences"
    detail = f"{count} {said} of secret values (the node's env:, the database URL) shown as {MASK} in the output kept"
    left = [f"{name}'s bytes {cut[0]} to {cut[1]}" for name, cut in sorted((cuts or {}).items()) if cut]
    if left:
        detail += f"; {' and '.join(left)} were cut, not stored: what they held is not counted"
    return {"count": count, "status": "masked", "detail": detail}
