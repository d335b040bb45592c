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
any value's URL (a proxy's `http://user:password@host`), and the database URL's secrets. A value
shorter than MIN_CHARS is never masked: `1`, `true` or `a100` would mangle every line that holds
them, and a credential that short protects nothing.

Where: the records a run stores (cell_work.py), never the stream as it is read. The markers and
metrics are judged on what the kernel really printed (a masked copy could make or break a PASS
marker's match), the sizes, sha256 and cuts say what it printed too; only the copies kept for
people to read, and any text quoting them (reasons, stage details, the last stderr line), are
masked. Masking whole kept copies, not chunks, means no value is split across a chunk's edge;
the one edge left is the cut of a long stream, where the piece of a value each side of it is
masked as well.
"""

from __future__ import annotations

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

    def __init__(self, secrets: Iterable[str]) -> None:
        values = sorted({s for s in secrets if len(s) >= MIN_CHARS}, key=len, reverse=True)
        self._values = [v.encode("utf-8", "surrogateescape") for v in values]
        # longest first: where one value holds another, the whole of it is masked
        self._bytes = re.compile(b"|".join(map(re.escape, self._values))) if values else None
        self._text = re.compile("|".join(map(re.escape, values))) if values else None
        self.count = 0

    def __bool__(self) -> bool:
        return self._bytes is not None

    def data(self, data: bytes) -> bytes:
        if self._bytes is None or not data:
            return data
        masked, n = self._bytes.subn(MASK.encode(), data)
        self.count += n
        return masked

    def text(self, text: str) -> str:
        if self._text is None or not text:
            return text
        masked, n = self._text.subn(MASK, text)
        self.count += n
        return masked

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
        """A stream's kept copy (streams.py): where it was cut, its head and tail masked apart, with
        a value's piece each side of the cut too (its rest is in the bytes left out)."""
        if not cut or self._bytes is None:
            return self.data(kept)
        start, end = int(cut[0]), int(cut[1])
        tail_len = max(size - end, 0)
        head, note, tail = kept[:start], kept[start : len(kept) - tail_len], kept[len(kept) - tail_len :]
        head, tail = self.data(head), self.data(tail)
        for value in self._values:
            head = self._edge(head, value, at_end=True)
            tail = self._edge(tail, value, at_end=False)
        return head + note + tail

    def _edge(self, data: bytes, value: bytes, at_end: bool) -> bytes:
        for n in range(min(len(value) - 1, len(data)), EDGE_CHARS - 1, -1):
            if at_end and data.endswith(value[:n]):
                self.count += 1
                return data[:-n] + MASK.encode()
            if not at_end and data.startswith(value[-n:]):
                self.count += 1
                return MASK.encode() + data[n:]
        return data

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
            if name in ("stdout", "stderr"):
                cut = (getattr(record, "output_cuts", None) or {}).get(name)
                masked = self.kept(value, cut, getattr(record, f"{name}_size"))
            else:
                masked = self.value(value)
            if name not in _OUTPUT:  # a reason quoting a line is the same occurrence again
                self.count = counted
            if masked != value:
                changes[name] = masked
        return dataclasses.replace(record, **changes) if changes else record  # type: ignore[type-var]


@functools.lru_cache(maxsize=8)
def _farm_secrets(
    nodes: tuple[tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...]], ...], url: str
) -> tuple[str, ...]:
    found = [secret for env, declared, plain in nodes for secret in env_secrets(dict(env), declared, plain)]
    return tuple(dict.fromkeys([*found, *url_secrets(url)]))


def farm_masker(spec: Any, database_url: str) -> Masker:
    """A fresh Masker (its count at 0) of every node's secrets and the database URL's.

    Every node's, not only the cell's own: a value one node's operator marked secret is no less
    secret where another node's kernel printed it."""
    nodes = tuple(
        (tuple(sorted(node.env.items())), tuple(node.secret_env), tuple(node.plain_env))
        for node in spec.nodes.values()
        if node.env
    )
    return Masker(_farm_secrets(nodes, database_url))


def masked_note(count: int) -> dict[str, Any]:
    """The stage_details entry that tells a reviewer output was masked, and how often."""
    said = "occurrence" if count == 1 else "occurrences"
    return {
        "count": count,
        "status": "masked",
        "detail": f"{count} {said} of secret values (the node's env:, the database URL) shown as {MASK}",
    }
