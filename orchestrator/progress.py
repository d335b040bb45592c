"""Progress for people: a live display on a terminal, plain lines elsewhere.

Both are scheduler Listeners. Plain lines (one per node, one per cell) are what
a cron mail or a CI log should hold; the live display adds a progress bar.
Both write through a Guarded stream (guarded.py): output that cannot be written,
or whose reader stopped reading, never costs the run.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.farm_writable import WHY
from orchestrator.guarded import Guarded
from orchestrator.outcomes import CELL_STAGES, RAN_AS_EXPECTED, Outcome, is_as_expected, is_infra
from orchestrator.plan import Cell
from orchestrator.run.cell import CellResult
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.run.summary import RunSummary, counts_text
from orchestrator.terminal import card_text, printable


def describe_node(node: str, snapshot: NodeSnapshot | None, error: str | None) -> str:
    if error:
        return f"node {node}: unreachable or unusable: {error}"
    assert snapshot is not None
    if len(snapshot.gpus) > 1:
        # each card as terminal.card_text shows it: a look-alike read as the real card here too (review 213)
        cards = ", ".join(f"{g.index}: {card_text(g.name)} CC {g.cc}" for g in snapshot.gpus)
        gpu = f"{len(snapshot.gpus)} GPUs ({cards}), driver {snapshot.driver}"
    elif snapshot.has_gpu:
        gpu = f"{card_text(snapshot.gpu_name or '')}, CC {snapshot.cc}, driver {snapshot.driver}"
    else:
        gpu = "no GPU (compile-only)"
    drift = f" [farm.yaml declares CC {snapshot.declared_cc}]" if snapshot.cc_mismatch else ""
    unconfirmed = [g for g in snapshot.gpus if not g.verified]
    stand_in = (
        f" [not confirmed by the NVIDIA driver: {len(unconfirmed)} card(s) certify nothing]" if unconfirmed else ""
    )
    return f"node {node}: {gpu}; nvcc {snapshot.nvcc_version}{drift}{stand_in}"


def _ran_as_expected(result: CellResult) -> bool:
    """The pages' rule (report.model.unconfirmed): a pass, expected-refusal or fixed, its kernel run on a
    card. Every as-expected outcome was counted, a known-failure or compile-only too: `farm verify`'s
    last line said "certify nothing" of cells no page flags (review 152)."""
    verdict = result.verdict
    return verdict is not None and verdict.outcome in RAN_AS_EXPECTED and result.gpu is not None


def on_standin(result: CellResult) -> bool:
    """A cell as the pages flag it whose kernel ran on a card the NVIDIA driver did not confirm."""
    return _ran_as_expected(result) and result.gpu is not None and not result.gpu.verified


def on_farm_writable(result: CellResult) -> bool:
    """A cell as the pages flag it whose kernel ran unconfined on the farm's own machine (farm_writable.py)."""
    return _ran_as_expected(result) and result.farm_writable


def certify_nothing_counts(results: list[tuple[Cell, CellResult, int]], standin_words: str) -> str:
    """A run's last line's note: how many of its cells the pages flag certify nothing, and why (a stand-in
    card, in `standin_words`; farm writable), each said (review 141: a farm-writable night read green)."""
    standin = sum(on_standin(result) for _, result, _ in results)
    writable = sum(on_farm_writable(result) for _, result, _ in results)
    said = [f"; {standin} of them {standin_words}: certify nothing"] if standin else []
    return "".join(said + ([f"; {writable} of them {WHY}: certify nothing"] if writable else []))


def describe_cell(cell: Cell, result: CellResult, result_id: int) -> str:
    verdict = result.verdict
    assert verdict is not None
    mark = "ok  " if is_as_expected(verdict.outcome) else ("INFR" if is_infra(verdict.outcome) else "BAD ")
    stages = ", ".join(
        f"{s.name} {s.seconds:.1f}s" + (" (cached)" if s.status == "cached" else "")
        for s in result.stages
        if s.name in CELL_STAGES
    )
    expected = "" if verdict.outcome.value == result.expectation.label else f" (expected {result.expectation.label})"
    # the cell's own line says it: "ok   pass" on a stand-in card read as a certificate in a CI log or
    # a cron mail, where "certifies nothing" was on the node's line alone (a red-team finding)
    # and where it ran: the farm's own machine, unconfined, as the farm's user (farm_writable.py, review 141)
    said = ["card not confirmed by the NVIDIA driver (stand-in)"] if on_standin(result) else []
    said += [WHY] if on_farm_writable(result) else []
    note = f" [{'; '.join(said)}: certifies nothing]" if said else ""
    # a cell not as expected says why and where the rest is: `BAD  build-fail ... #1` said neither, and
    # nothing told a newcomer that #1 is `farm show 1`'s (a review finding, round 95); an infra-error's
    # line said neither either, and a node's missing cuobjdump or old driver read as the farm's mystery
    # until `farm show` (review 123)
    why = f": {verdict.reason} (farm show {result_id})" if mark != "ok  " else ""
    return f"{mark} {verdict.outcome.value:<18} {cell.label}{expected}{note}  [{stages}]  #{result_id}{why}"


NAMED = 20  # cells a --quiet not-run line names; the rest are counted


class PlainListener:
    """Timestamped lines, safe to interleave from worker threads."""

    def __init__(
        self,
        stream: TextIO | Guarded | None = None,
        quiet: bool = False,
        verdict: bool = False,
        steps: Callable[[RunSummary], list[str]] | None = None,
    ) -> None:
        stream = stream or sys.stdout
        self.stream = stream if isinstance(stream, Guarded) else Guarded(stream)
        self.quiet = quiet  # the cron mail: only why nodes could not be used, each cause once
        self.verdict = verdict  # end with the run's verdict line (for a log file)
        self.steps = steps  # the run's next steps (summary.NextSteps), before its verdict line
        self._lock = threading.Lock()
        self._causes: set[tuple[str, str]] = set()
        self._not_run: dict[tuple[str, str], list[str]] = {}  # (node, why) -> its not-run cells' labels

    def _line(self, text: str) -> None:
        with self._lock:
            print(f"[{datetime.now():%H:%M:%S}] {printable(text, keep_newlines=False)}", file=self.stream, flush=True)

    def run_started(self, run_id: int, cells: list[Cell]) -> None:
        if not self.quiet:
            self._line(f"run {run_id}: {len(cells)} cells on {len({c.node for c in cells})} nodes")

    def node_ready(self, node: str, snapshot: NodeSnapshot | None, error: str | None) -> None:
        if not self.quiet or error:
            self._line(describe_node(node, snapshot, error))
        if error:
            self._causes.add((node, error))

    def cell_started(self, cell: Cell) -> None:
        pass

    def cell_finished(self, cell: Cell, result: CellResult, result_id: int) -> None:
        verdict = result.verdict
        assert verdict is not None
        if not self.quiet:
            self._line(describe_cell(cell, result, result_id))
        elif verdict.outcome == Outcome.NOT_RUN:  # said at the run's end, naming the cells with no verdict
            with self._lock:
                self._not_run.setdefault((cell.node, verdict.reason), []).append(cell.label)
        elif is_infra(verdict.outcome) and (cell.node, verdict.reason) not in self._causes:
            self._causes.add((cell.node, verdict.reason))
            stage = f" at {verdict.failed_stage}" if verdict.failed_stage else ""  # a stop before any stage: none
            self._line(f"node {cell.node}: {verdict.outcome}{stage}: {verdict.reason}")

    def run_finished(self, summary: RunSummary) -> None:
        # `node here: not-run: ...` once per node said nothing of which cells have no verdict (a red-team finding)
        for (node, why), labels in self._not_run.items():
            named = ", ".join(labels[:NAMED]) + (f" and {len(labels) - NAMED} more" if len(labels) > NAMED else "")
            self._line(f"node {node}: not-run: {len(labels)} cell{'s' * (len(labels) != 1)} ({named}): {why}")
        for line in self.steps(summary) if self.steps is not None else []:
            self._line(line)
        if self.verdict:
            note = certify_nothing_counts(summary.results, "on stand-in cards")
            self._line(
                f"run {summary.run_id}: {summary.as_expected} as expected, {summary.unexpected} not, "
                f"{counts_text(summary)}; exit {summary.exit_code}{note}"
            )


class LiveListener(PlainListener):
    """A rich progress bar, with the plain lines printed above it."""

    def __init__(self, stream: TextIO | Guarded | None = None, console: Console | None = None) -> None:
        super().__init__(stream)
        self.console = console or Console(file=self.stream)  # type: ignore[arg-type] - a TextIO as rich uses one
        self.progress = Progress(
            TextColumn("[bold]farm"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}", markup=False),  # a label is text: no rich markup, no emoji codes
            console=self.console,
            transient=True,
        )
        self.task = None

    def _line(self, text: str) -> None:
        with self._lock:  # no emoji codes either: a card's name ":white_check_mark:" is text
            self.console.print(printable(text, keep_newlines=False), markup=False, highlight=False, emoji=False)

    def run_started(self, run_id: int, cells: list[Cell]) -> None:
        super().run_started(run_id, cells)
        self._per_node = Counter(cell.node for cell in cells)
        self._total = len(cells)
        self.progress.start()
        self.task = self.progress.add_task("", total=self._total)

    def node_ready(self, node: str, snapshot: NodeSnapshot | None, error: str | None) -> None:
        super().node_ready(node, snapshot, error)
        # a node of several card models runs each of its cells once per model: the bar counted the
        # cells planned before the probe, and ended at "2/1" over a run of 2 (a red-team finding)
        models = len(snapshot.devices()) if snapshot is not None and not error else 1
        if models > 1:
            with self._lock:
                self._total += self._per_node[node] * (models - 1)
                self.progress.update(self.task, total=self._total)

    def cell_started(self, cell: Cell) -> None:
        # the label names the card (nvidia-smi's name, the node's to choose) on a node of several card
        # models: shown raw, its ESC sequences drew a green "ok   pass" line of their own over the bar,
        # and rich read "[link=...]" in it as markup (a red-team finding); escaped for the terminal,
        # and shown by a column that reads no markup
        self.progress.update(self.task, description=printable(cell.label, keep_newlines=False))

    def cell_finished(self, cell: Cell, result: CellResult, result_id: int) -> None:
        super().cell_finished(cell, result, result_id)
        self.progress.advance(self.task)

    def run_finished(self, summary: RunSummary) -> None:
        self.progress.stop()


class Listeners:
    """Several listeners as one (the terminal and a log file, say)."""

    def __init__(self, listeners: list) -> None:
        self.listeners = listeners

    def __getattr__(self, event: str):
        def fan_out(*args: object) -> None:
            for listener in self.listeners:
                getattr(listener, event)(*args)

        return fan_out
