"""What a run tells as it goes (a Listener: the terminal's display, the plain log,
the worker processes' pipe) and what it comes to (RunSummary, and its exit code)."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from orchestrator.errors import EXIT_INFRA, EXIT_INTERNAL, EXIT_OK, EXIT_UNEXPECTED
from orchestrator.outcomes import is_as_expected, is_infra

if TYPE_CHECKING:  # annotations only: the command line imports this before any of the pipeline (`farm --help`)
    from pathlib import Path

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


def rerun_line(summary: RunSummary, selectors: Sequence[str], all_: bool, config: Path) -> str | None:
    """A run that finished with cells that could not run (a node lost, unreachable): the nodes and the command
    that reruns just their cells. Its last line had said "some cells could not run (infra)" and named the
    node only in each cell's reason, the rerun left to the operator to work out (review 264)."""
    failed = [(c, r) for c, r, _id in summary.results if r.verdict is not None and is_infra(r.verdict.outcome)]
    if summary.stopped or not failed:  # a stopped run's line names its own next step (review 253)
        return None
    nodes = sorted({cell.node for cell, _ in failed})
    kinds = Counter(result.verdict.outcome.value for _, result in failed if result.verdict is not None)
    on_nodes = [(cell, result) for cell, result, _id in summary.results if cell.node in nodes]
    # every cell of those nodes failed: the run's own selection on them; else the failed cells' kernel:variants
    whole = len(on_nodes) == len(failed)
    picked = list(dict.fromkeys(f"{c.kernel}:{c.variant}" for c, _ in failed))
    chosen = (["--all"] if all_ else list(selectors)) if whole else picked
    again = shlex.join(["farm", "verify", *chosen, *[a for n in nodes for a in ("--node", n)], "--config", str(config)])
    # a kernel:variant failed on one node and passed on another is run again on both: said, not hidden
    extra = 0 if whole else sum(1 for c, _ in on_nodes if f"{c.kernel}:{c.variant}" in picked) - len(failed)
    also = f" (and {extra} cell{'s' * (extra != 1)} of theirs that had a verdict)" if extra else ""
    said = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    return (
        f"run {summary.run_id}: {len(failed)} cell{'s' * (len(failed) != 1)} could not run on "
        f"node{'s' * (len(nodes) != 1)} {', '.join(nodes)} ({said}; `farm show ID` says why); "
        f"to rerun just them{also}: {again}"
    )
