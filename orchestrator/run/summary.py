"""What a run tells as it goes (a Listener: the terminal's display, the plain log,
the worker processes' pipe) and what it comes to (RunSummary, and its exit code)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from orchestrator.errors import EXIT_INFRA, EXIT_INTERNAL, EXIT_OK, EXIT_UNEXPECTED
from orchestrator.outcomes import is_as_expected, is_infra

if TYPE_CHECKING:  # annotations only: the command line imports this before any of the pipeline (`farm --help`)
    from orchestrator.plan import Cell
    from orchestrator.run.cell import CellResult
    from orchestrator.run.snapshot import NodeSnapshot


class Listener(Protocol):
    def run_started(self, run_id: int, cells: list[Cell]) -> None: ...
    def node_ready(self, node: str, snapshot: NodeSnapshot | None, error: str | None) -> None: ...
    def cell_started(self, cell: Cell) -> None: ...
    def cell_finished(self, cell: Cell, result: CellResult, result_id: int) -> None: ...
    def run_finished(self, summary: RunSummary) -> None: ...


class NullListener:
    def run_started(self, run_id: int, cells: list[Cell]) -> None: ...
    def node_ready(self, node: str, snapshot: NodeSnapshot | None, error: str | None) -> None: ...
    def cell_started(self, cell: Cell) -> None: ...
    def cell_finished(self, cell: Cell, result: CellResult, result_id: int) -> None: ...
    def run_finished(self, summary: RunSummary) -> None: ...


@dataclass
class RunSummary:
    run_id: int
    outcomes: Counter[str] = field(default_factory=Counter)
    results: list[tuple[Cell, CellResult, int]] = field(default_factory=list)
    stage_seconds: Counter[str] = field(default_factory=Counter)
    wall_seconds: float = 0.0
    bytes_shipped: int = 0
    stopped: str | None = None  # the signal that stopped the run before every cell had its verdict
    internal: list[str] = field(default_factory=list)  # the farm's own errors, per node (exit 70)

    @property
    def unexpected(self) -> int:
        return sum(n for o, n in self.outcomes.items() if not is_as_expected(o) and not is_infra(o))

    @property
    def infra(self) -> int:
        return sum(n for o, n in self.outcomes.items() if is_infra(o))

    @property
    def as_expected(self) -> int:
        return sum(n for o, n in self.outcomes.items() if is_as_expected(o))

    @property
    def exit_code(self) -> int:
        if self.internal:
            return EXIT_INTERNAL
        if self.unexpected:
            return EXIT_UNEXPECTED
        if self.infra or self.stopped:  # a run cut short (stored aborted) never exits 0
            return EXIT_INFRA
        return EXIT_OK
