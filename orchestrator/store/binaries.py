"""The binaries a run's cached builds must hash to, read once per run rather than once per node.

What a cached build on a node must still hash to is the binary sha256 that the latest result with
its build key on that node recorded. Each node asked for its own keys at its start: on SQLite no
index serves (node, build_key), so each ask scanned the results table in the farm's own process.
A run asks for every node of its plan at once, and only keys no node asked for before are read
again: nodes of one toolchain share their keys (the node is in the build folder, not its key), so a
homogeneous fleet reads them once. One run at a time writes a database (the run lock), so the
rows read cannot change but by this run's own results, which the store adds here as it writes
them: every answer is what the query would have said at that moment.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, select

from orchestrator.store.tables import ResultRow

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from sqlalchemy.orm import Session

CHUNK = 500  # bounds each IN list (PostgreSQL, SQLite)
_RESULTS = ResultRow.__table__
# built once, its IN lists bound per read: built per node, the statement and its cache key (SQLAlchemy
# finds its compiled SQL by it) were half of the read's CPU, each node's once (issue 11)
RECORDED = (
    select(_RESULTS.c.node, _RESULTS.c.build_key, _RESULTS.c.binary_sha256)
    .where(
        _RESULTS.c.node.in_(bindparam("nodes", expanding=True)),
        _RESULTS.c.build_key.in_(bindparam("keys", expanding=True)),
    )
    .where(_RESULTS.c.binary_sha256.is_not(None))
    .order_by(_RESULTS.c.id)
)


class RunBinaries:
    """The recorded binaries read so far in one run: (node, build key) -> sha256, None where none."""

    def __init__(self, nodes: Iterable[str] = ()) -> None:
        self.nodes = frozenset(nodes)  # the run's planned nodes, read together
        self.found: dict[tuple[str, str], str | None] = {}
        self.lock = threading.Lock()  # one read at a time: a node asking meanwhile waits for it, not reads again


class RecordedBinaries:
    """Store's lookups of recorded binaries (database.py), cached for the run (RunBinaries)."""

    _binaries: RunBinaries

    def _reading(self) -> AbstractContextManager[Session]:
        raise NotImplementedError  # database.Store's

    def recorded_binary(self, node: str, build_key: str) -> str | None:
        """The binary sha256 the latest result with this build key on this node
        recorded: what a cached build on the node must still hash to."""
        return self.recorded_binaries(node, [build_key])[build_key]

    def recorded_binaries(self, node: str, build_keys: Sequence[str]) -> dict[str, str | None]:
        """recorded_binary for each of these build keys on this node (None where none is
        recorded). Keys not read before in this run are read for every node of the run in
        one query (and, from a worker process, one round trip to the parent)."""
        cache = self._binaries
        with cache.lock:
            missing = [key for key in dict.fromkeys(build_keys) if (node, key) not in cache.found]
            if missing:
                nodes = sorted(cache.nodes | {node})
                read = self._read_binaries(nodes, missing)
                for one in nodes:
                    for key in missing:
                        cache.found[(one, key)] = read.get((one, key))
            return {key: cache.found[(node, key)] for key in build_keys}

    def _read_binaries(self, nodes: list[str], keys: list[str]) -> dict[tuple[str, str], str]:
        found: dict[tuple[str, str], str] = {}
        with self._reading() as session:
            for n in range(0, len(nodes), CHUNK):
                for k in range(0, len(keys), CHUNK):
                    rows = session.execute(RECORDED, {"nodes": nodes[n : n + CHUNK], "keys": keys[k : k + CHUNK]})
                    for node, key, sha in rows:  # the latest wins
                        found[(node, key)] = sha
        return found

    def _binary_written(self, fields: dict[str, Any]) -> None:
        """A result this run wrote, once its transaction committed: the newest row of its
        (node, build key), so what a later lookup of them would read. Learnt before the commit, a
        result the database refused still named the binary a cached build must hash to."""
        key, sha = fields.get("build_key"), fields.get("binary_sha256")
        if key is not None and sha is not None:
            with self._binaries.lock:
                self._binaries.found[(fields["node"], key)] = sha
