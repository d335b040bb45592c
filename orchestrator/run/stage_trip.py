"""A stage's part of a cell's round trip (Trip): its script, or the node runner's spec, and the files it sends
back; a later stage's part read ahead of its turn (Fetched); and how the farm reads a stage's control text
(last_match). Passive records: trips.py sends them, the stages (stages/) make and read them."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.transport import CommandResult


@functools.lru_cache(maxsize=512)
def _multiline(pattern: str) -> re.Pattern[str]:
    # compiled once per pattern: a cell reads about 18 control lines, and re's own cache lookup per call
    # (the flags hashed with it) cost more than the search in the few hundred bytes (issue 11, profiled)
    return re.compile(pattern, re.M)


def last_match(pattern: str, text: str) -> re.Match[str] | None:
    """The last line of `text` matching `pattern` (multi-line), or None."""
    found = None
    for found in _multiline(pattern).finditer(text):  # noqa: B007 - the last one is the answer
        pass
    return found


@dataclass
class Trip:
    """A stage's part of a round trip: its script, how long it may take, the files
    it sends back (tag, path on the node, byte limit, sink), and what the farm
    does with what came back (`state` holds the sinks the parser reads)."""

    stage: str
    # the shell's script, or what writes it: made only where a shell runs the stage (the resident
    # runner reads `spec`), since writing it cost the farm a tenth of its CPU per cell (issue 11)
    script: str | Callable[[], str]
    timeout: float
    files: list[tuple[str, str, int, Callable[[bytes], None]]]
    state: Any = None
    clean_up: bool = False  # the cell's folder goes once its files are read
    release: bool = False  # the GPU is free once the script's own part ended
    ends: tuple[str, ...] = ()  # files sent as their size, first and last `limit // 2` bytes (file_ends.py)
    spec: dict[str, Any] | None = None  # the same stage for the node's python3 (noderunner.py), where it has one

    def shell(self) -> str:
        if callable(self.script):
            self.script = self.script()
        return self.script


@dataclass
class Fetched:
    """A later stage's part of a cell's one round trip, read ahead of its turn."""

    trip: Trip
    outcome: CommandResult
    text: str
    started_at: datetime
    seconds: float
