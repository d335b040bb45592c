"""A matrix column's card in words, and a card its node's probe no longer finds.

index.html's heads said "(stand-in)" of a card the driver did not confirm; a run page's heads
named the card alone, so a reviewer reading runs/ID.html (where a cell's grey says "certifies
nothing" but not why) took a stand-in's column for the real card (review 240). Both pages' heads
are card_head's words now: the index's from the column's latest result, a run page's from that
run's own probe of the node (run_card).

A card swapped under its node's name (a T4 for an A100, the node still `here`) was said in its
column's head alone while its passes stayed green, where a node removed from farm.yaml is greyed:
gone_cards names such columns, and the report treats them as a departed node's (model.left).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from orchestrator.run.snapshot import card_columns
from orchestrator.terminal import card_text


def card_head(device: str | None, confirmed: bool, probed: bool) -> str:
    """A column's card as its head says it: its name, and where the driver did not confirm it,
    "(stand-in)" (a probe named it: nvidia-smi, not the driver) or "(declared: no probe read it)"
    (farm.yaml's word alone: review 127)."""
    if not device:
        return "no GPU"
    if confirmed:
        return card_text(device)
    return f"{card_text(device)} {'(stand-in)' if probed else '(declared: no probe read it)'}"


def _gpus_of(gpus: Any) -> list[dict[str, Any]]:
    return [g for g in gpus or [] if isinstance(g, dict)]


def probed_columns(gpus: list[dict[str, Any]] | None) -> list[str]:
    """The matrix's columns a stored probe's cards make: a name of two CCs is two columns, each
    "NAME (CC X.Y)" (run/snapshot.py card_columns), and still a card the probe found."""
    return card_columns([(str(g.get("name")), str(g.get("cc"))) for g in _gpus_of(gpus)])


def run_card(snaps: Sequence[Any], run_id: int, device: str | None) -> str:
    """card_head of column `device` as run `run_id`'s own probe of the node read it (`snaps`: the
    node's snapshots): confirmed where every GPU of that card the probe found was verified, as each
    of the run's results on it is (store.records.card_confirmed)."""
    probes = [s for s in snaps if s.run_id == run_id and s.gpu_name and not s.probe_error]
    if not probes:
        return card_head(device, False, False)
    snap = max(probes, key=lambda s: s.id or 0)
    gpus = _gpus_of(snap.gpus)
    if gpus:
        mine = [g for g, column in zip(gpus, probed_columns(gpus), strict=True) if column == device]
        confirmed = bool(mine) and all(g.get("verified") for g in mine)
    else:  # a probe stored without its cards (older rows): the node's word for its card
        confirmed = bool(snap.real_gpu)
    return card_head(device, confirmed, True)


def gone_cards(columns: Iterable[Any]) -> dict[tuple[str, str], str]:
    """(node, card) -> why the node's latest probe (standing.Column.snapshot) no longer finds that
    card: the node was reached and named another (a T4 swapped for an A100 under its name)."""
    found = {}
    for col in columns:
        n = col.snapshot
        if n is None or n.probe_error or not col.device or col.device == n.gpu_name:
            continue
        if col.device in probed_columns(n.gpus):
            continue
        there = card_text(n.gpu_name or "no GPU")
        found[col.key] = f"no {card_text(col.device)} in run {n.run_id}'s probe (there: {there})"
    return found
