"""What each run of the history ran on: its nodes and their cards, as each run's probe read them.

history.html listed runs by trigger, commit and counts only, so "which runs were on the lent
H100, which on the H200, which on the course's nodes?" took opening every run's page (review
108): the lent H100's runs and the H200's share triggers and counts. The snapshots are the
model's already (node_history), so this costs the render no query.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from orchestrator.store.tables import NodeSnapshotRow


def card_words(snap: NodeSnapshotRow) -> str:
    """A node's card as one run's probe found it, in the matrix's words."""
    if snap.probe_error:
        return f"{snap.node}: unreachable"
    if not snap.gpu_name:
        return f"{snap.node}: no GPU"
    count = f"{snap.gpu_count}× " if (snap.gpu_count or 0) > 1 else ""
    # a card the driver did not confirm certifies nothing: never read as the real card here either
    standin = "" if snap.real_gpu else " (stand-in)"
    return f"{snap.node}: {count}{snap.gpu_name}{standin}"


def run_cards(node_history: dict[str, list[NodeSnapshotRow]]) -> dict[int, list[str]]:
    """run id -> each node it probed, with its card (card_words), by node name."""
    found: dict[int, set[tuple[str, str]]] = defaultdict(set)
    snaps: Iterable[NodeSnapshotRow] = (s for history in node_history.values() for s in history)
    for snap in snaps:
        found[snap.run_id].add((snap.node, card_words(snap)))
    return {run: [words for _node, words in sorted(nodes)] for run, nodes in found.items()}
