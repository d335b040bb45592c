"""The not-run rows a run's unfinished cells get: at the next start (the farm died mid-run) and
when a run is rebuilt from a journal that ends before every planned cell's result."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.outcomes import Outcome
from orchestrator.run.snapshot import card_columns
from orchestrator.store.tables import NodeSnapshotRow, PlannedCell, ResultRow


def unfinished(
    planned: Sequence[tuple[str, str, str, str]], done: set[tuple[str, str, str, str]]
) -> list[tuple[str, str, str, str]]:
    """The planned cells (kernel, variant, node, device) with no result among `done`.
    A node with several card models planned its cells again per card: a cell planned
    per card needs that card's result; one planned for the node, any of its results
    (or its per-card plans)."""
    per_card = {(k, v, n) for k, v, n, d in planned if d}
    covered = per_card | {(k, v, n) for k, v, n, _d in done}  # made once: per cell, 0.1 s at 3,200 cells
    return [(k, v, n, d) for k, v, n, d in planned if ((k, v, n, d) not in done if d else (k, v, n) not in covered)]


def never_finished(planned: Sequence[PlannedCell], done: set[tuple[str, str, str, str]]) -> list[PlannedCell]:
    """unfinished, of PlannedCell objects."""
    keys = [(p.kernel, p.variant, p.node, p.device or "") for p in planned]
    missing = set(unfinished(keys, done))
    return [p for p, key in zip(planned, keys, strict=True) if key in missing]


def probed_cards(session: Session, run_id: int) -> dict[str, NodeSnapshotRow]:
    """node -> the run's latest probe of it, where it found a GPU of one model: the card its
    cells planned before the probe (device "") ran on, and the column their not-run rows belong in
    (with no card, a SIGKILLed run's rows made a column "NODE, no GPU" of their own, for good)."""
    found: dict[str, NodeSnapshotRow] = {}
    for snap in session.scalars(select(NodeSnapshotRow).where(NodeSnapshotRow.run_id == run_id)):
        cards = [(str(gpu.get("name")), str(gpu.get("cc"))) for gpu in snap.gpus or [] if isinstance(gpu, dict)]
        models = set(card_columns(cards))  # one name of two CCs is two columns
        if snap.gpu_name and models <= {snap.gpu_name} and (snap.node not in found or found[snap.node].id < snap.id):
            found[snap.node] = snap
    return found


def not_run_row(
    run_id: int, cell: PlannedCell, now: datetime, reason: str, cards: dict[str, NodeSnapshotRow]
) -> ResultRow:
    card = cards.get(cell.node) if not cell.device else None
    return ResultRow(
        run_id=run_id,
        kernel=cell.kernel,
        variant=cell.variant,
        node=cell.node,
        device=card.gpu_name if card is not None else cell.device,
        cc=card.cc if card is not None else None,
        real_gpu=card.real_gpu if card is not None else False,
        contract="",
        expected="unknown",
        contract_expected="unknown",
        expected_reason="",
        outcome=Outcome.NOT_RUN.value,
        failed_stage=None,
        reason=reason,
        stage_seconds={},
        stage_details={},
        build_command="",
        build_log=b"",
        stdout=b"",
        stderr=b"",
        source_sha256="",
        sources={},
        dependencies={},
        output_cuts={},
        markers={},
        instruction_counts={},
        required_instructions={},
        elf_targets=[],
        ptx_targets=[],
        started_at=now,
        ended_at=now,
    )
