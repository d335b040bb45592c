"""What a run tells as it goes (a Listener: the terminal's display, the plain log,
the worker processes' pipe) and what it comes to (RunSummary, and its exit code)."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from orchestrator.errors import EXIT_INFRA, EXIT_INTERNAL, EXIT_OK, EXIT_UNEXPECTED
from orchestrator.outcomes import INFRA, Outcome, is_as_expected, is_infra
from orchestrator.store.url_secrets import redact_url

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


def counts_text(summary: RunSummary) -> str:
    """The cells with no verdict as a run's last line counts them (the terminal's, --log's): "N infra" (a
    node's infra-error), and beside it "M not-run" where cells were not run. Not-run had been counted as
    infra unless the run was stopped, and --log's line said "3 infra" of a stop's cells (review 267),
    where history.html and the JSON summary tell the two apart (reviews 259, 264)."""
    not_run = summary.outcomes.get(Outcome.NOT_RUN.value, 0)
    if summary.stopped:  # a stopped run's not-run cells are the stop's, not the nodes' (review 253)
        return f"{summary.infra - not_run} infra, {not_run} not-run (stopped by {summary.stopped})"
    return f"{summary.infra - not_run} infra, {not_run} not-run" if not_run else f"{summary.infra} infra"


def verify_command(chosen: Sequence[str], nodes: Sequence[str], config: Path, database: str | None) -> str:
    """`farm verify` of those selectors on those nodes, with the run's --config and, where the run's
    database was not farm.yaml's, that database: without it the rerun stored its verdicts in farm.yaml's
    database, the night's run in another (review 267). A password in it is *** (never printed)."""
    words = ["farm", "verify", *chosen, *[a for n in nodes for a in ("--node", n)], "--config", str(config)]
    return shlex.join(words + (["--database", redact_url(database)] if database is not None else []))


def _masked(database: str | None) -> str:
    """Where verify_command masked the database's password: the command, as printed, needs it back."""
    if database is None or redact_url(database) == database:
        return ""
    return " (with the database's password where *** stands: it is not printed)"


def rerun_line(
    summary: RunSummary, selectors: Sequence[str], all_: bool, config: Path, database: str | None = None
) -> str | None:
    """A run that ended with cells that could not run (a node lost, unreachable): the nodes and the command
    that reruns just their cells. Its last line had said "some cells could not run (infra)" and named the
    node only in each cell's reason, the rerun left to the operator to work out (review 264). A stopped
    run's not-run cells are the stop's (stop_line reruns them): its line names the nodes' infra-error
    cells alone, which had gone unsaid under the stop's line (review 267)."""
    lost = (Outcome.INFRA_ERROR.value,) if summary.stopped else tuple(o.value for o in INFRA)
    failed = [(c, r) for c, r, _id in summary.results if r.verdict is not None and r.verdict.outcome in lost]
    if not failed:
        return None
    nodes = sorted({cell.node for cell, _ in failed})
    kinds = Counter(result.verdict.outcome.value for _, result in failed if result.verdict is not None)
    on_nodes = [(cell, result) for cell, result, _id in summary.results if cell.node in nodes]
    # every cell of those nodes failed: the run's own selection on them; else the failed cells' kernel:variants
    whole = len(on_nodes) == len(failed)
    picked = list(dict.fromkeys(f"{c.kernel}:{c.variant}" for c, _ in failed))
    chosen = (["--all"] if all_ else list(selectors)) if whole else picked
    again = verify_command(chosen, nodes, config, database)
    # a kernel:variant failed on one node and passed on another is run again on both: said, not hidden
    extra = sum(
        1
        for c, r in on_nodes
        if f"{c.kernel}:{c.variant}" in picked and r.verdict is not None and not is_infra(r.verdict.outcome)
    )
    also = f" (and {extra} cell{'s' * (extra != 1)} of theirs that had a verdict)" if extra and not whole else ""
    said = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    return (
        f"run {summary.run_id}: {len(failed)} cell{'s' * (len(failed) != 1)} could not run on "
        f"node{'s' * (len(nodes) != 1)} {', '.join(nodes)} ({said}; `farm show ID` says why); "
        f"to rerun just them{also}{_masked(database)}: {again}"
    )


def stop_line(
    summary: RunSummary, chosen: Sequence[str], nodes: Sequence[str], config: Path, database: str | None
) -> str:
    """A stopped run's next step, named: "not-run" alone left the night's cells without a verdict (review 127)."""
    again = verify_command(chosen, nodes, config, database)
    return (
        f"run {summary.run_id} was stopped by {summary.stopped}: its unfinished cells are not-run; "
        f"for their verdicts run it again{_masked(database)}: {again}"
    )


@dataclass(frozen=True)
class NextSteps:
    """The lines a run's end names its next steps with, before its verdict line, on the terminal and in
    --log alike: cron's log had the verdict and not the rerun, which went to stdout only (review 267)."""

    selectors: Sequence[str]
    all_: bool
    nodes: Sequence[str]  # the run's --node
    config: Path  # absolute: cron's working folder is not the operator's
    database: str | None  # the run's database where it was not farm.yaml's, else None

    def __call__(self, summary: RunSummary) -> list[str]:
        chosen = ["--all"] if self.all_ else list(self.selectors)
        lines = [stop_line(summary, chosen, self.nodes, self.config, self.database)] if summary.stopped else []
        lost = rerun_line(summary, self.selectors, self.all_, self.config, self.database)
        return lines + ([lost] if lost else [])
