"""The node runner compiled by the farm's own interpreter, once per source.

Compiling it costs ~30 ms of the farm's CPU, under the GIL, before any node's
first channel: on every `farm verify` and on the critical path of every node of
the run. The marshalled code is kept where Python keeps the farm's own bytecode
(this package's __pycache__, named by the source's and the interpreter's
digests), so it carries the same trust as the farm's .pyc files: whoever can
write there can already change the farm (a tampered resident.pyc would run on
every node just the same). It is written even under PYTHONDONTWRITEBYTECODE
(both machines this farm is measured on set it in their images, which would
leave the farm compiling on every run): that asks the import system not to
write .pyc files, and this is no import but the farm's own cache, like its
archives. With a pycache prefix elsewhere, or a read-only install, it is
compiled each time.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
import tempfile
import threading
import types
import zlib
from importlib.util import MAGIC_NUMBER
from pathlib import Path

CACHE_DIR = Path(__file__).resolve().with_name("__pycache__")
KEEP = 3  # runner files kept per interpreter tag: this one and the two newest others


def compiled(source: bytes) -> bytes:
    """The runner compiled by the farm's own interpreter (marshal): a node's python3
    whose bytecode is the farm's (the same magic number, as .pyc files are checked)
    loads it and compiles nothing; any other compiles the source, sent beside it."""
    with _COMPILING:  # once: every node's thread asks at its start (3-5 compiles of 26 ms each raced)
        code = _COMPILED.get(source)
        if code is None:
            code = _COMPILED[source] = _kept(source)
    return code


def cache_file(source: bytes) -> Path | None:
    """Where this source's code is kept, or None where Python keeps no bytecode here."""
    if sys.pycache_prefix:
        return None
    digest = hashlib.sha256(MAGIC_NUMBER + sys.version.encode() + b"\0" + source).hexdigest()[:40]
    return CACHE_DIR / f"farm-runner.{sys.implementation.cache_tag}.{digest}.marshal"


def _kept(source: bytes) -> bytes:
    path = cache_file(source)
    if path is not None:
        with contextlib.suppress(OSError, ValueError, EOFError, TypeError):
            kept = path.read_bytes()
            # 0.4 ms: a damaged file is compiled over, never sent to a node; one that unmarshals to no
            # code (a string, None) was sent to every node as the runner, every run (a red-team finding)
            if isinstance(marshal.loads(kept), types.CodeType):
                return kept
    code = marshal.dumps(compile(source, "farm-runner", "exec"))
    if path is not None:
        with contextlib.suppress(OSError):  # a read-only install: compiled again next time
            _keep(path, code)
    return code


def _keep(path: Path, code: bytes) -> None:
    path.parent.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".farm-runner.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(code)
        os.replace(tmp, path)  # whole or absent: a reader never meets half of it
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    # older farms' runners go, but not the newest few: two interpreters of one minor version
    # (3.12.3 and 3.12.8 share cache_tag) each deleting the other's would compile on every run
    kept = sorted(
        path.parent.glob(f"farm-runner.{sys.implementation.cache_tag}.*.marshal"),
        key=lambda p: p.stat().st_mtime if p.exists() else 0.0,
        reverse=True,
    )
    for old in [p for p in kept if p != path][KEEP - 1 :]:
        old.unlink(missing_ok=True)


_COMPILED: dict[bytes, bytes] = {}
_COMPILING = threading.Lock()


# blob -> (blob, its zlib): what the resident runner's stdin carries, made once per process (squeezed)
_SQUEEZED: dict[int, tuple[bytes, bytes]] = {}


def squeezed(blob: bytes, level: int = 1) -> bytes:
    """`blob` compressed, once per process per blob (by identity: compiled() and the runner's source
    are the same objects on every node's start). The resident runner's code and source were 420 KB
    on every node's channel, a millisecond of the farm's CPU each in paramiko's packets; squeezed,
    172 KB (the code compresses at level 1 in 4 ms, once)."""
    with _COMPILING:
        kept = _SQUEEZED.get(id(blob))
        if kept is None or kept[0] is not blob:
            kept = _SQUEEZED[id(blob)] = (blob, zlib.compress(blob, level))
    return kept[1]
