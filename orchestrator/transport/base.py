"""The transport interface every stage uses, and its lifecycle.

A transport is created closed; open() connects (a local one has nothing to
connect); run/put/read act; close() releases. It is a context manager, and a
closed transport refuses use with an error naming the method, so a stage can
never silently run a command on a connection another thread closed.

Every command is a POSIX shell string built by the farm, with every value from
configuration quoted by shlex.quote. The node's declared `env` is exported in
front of each command, quoted the same way, never passed through sshd's
AcceptEnv (which silently drops names it does not list).
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import InfraError
from ..schema import NodeSpec


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Transport(ABC):
    """Acts on one node. Not thread-safe: each worker thread opens its own."""

    def __init__(self, name: str, node: NodeSpec) -> None:
        self.name = name
        self.node = node
        self._open = False

    # lifecycle --------------------------------------------------------
    def open(self) -> None:
        if not self._open:
            self._connect()
            self._open = True

    def close(self) -> None:
        if self._open:
            self._open = False
            self._disconnect()

    def __enter__(self) -> Transport:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_open(self, method: str) -> None:
        if not self._open:
            raise InfraError(f"{type(self).__name__}.{method}() on node {self.name!r}: the transport is closed")

    # actions ----------------------------------------------------------
    def run(self, command: str, *, timeout: float) -> CommandResult:
        """Run a shell command; a non-zero exit is a result, not an error.

        Raises CommandTimeout if the command (or its channel) outlives
        `timeout`, InfraError if the node cannot be reached.
        """
        self._require_open("run")
        return self._run(self._with_env(command), timeout)

    def put(self, local: Path, remote: str) -> None:
        self._require_open("put")
        self._put(local, remote)

    def read(self, remote: str, limit: int) -> bytes:
        """The first `limit` bytes of a file on the node, unchanged."""
        self._require_open("read")
        return self._read(remote, limit)

    def stream(self, remote: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        """A file on the node, whole, in chunks as they arrive (memory stays
        bounded whatever its size). A missing file is an empty stream."""
        self._require_open("stream")
        return self._stream(remote, chunk)

    def _with_env(self, command: str) -> str:
        if not self.node.env:
            return command
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.node.env.items()))
        return f"export {exports}; {command}"

    # primitives each transport provides --------------------------------
    @abstractmethod
    def _connect(self) -> None: ...

    @abstractmethod
    def _disconnect(self) -> None: ...

    @abstractmethod
    def _run(self, command: str, timeout: float) -> CommandResult: ...

    @abstractmethod
    def _put(self, local: Path, remote: str) -> None: ...

    @abstractmethod
    def _read(self, remote: str, limit: int) -> bytes: ...

    @abstractmethod
    def _stream(self, remote: str, chunk: int) -> Iterator[bytes]: ...
