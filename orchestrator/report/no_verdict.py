"""The run's cells with no verdict, by cause, as each one's stored result says (review 130).

The index's "What changed" called every infra-error and not-run cell "the node, not the
kernel". A not-run cell is often no node's doing: the operator stopped the run (its reason
"the run was stopped (SIGTERM) before this cell finished", classify/), or the farm died and
the next start recorded it (store/recovery.py: "... (found at the next start)", "... (from its
journal)"). Each cause is counted and said as its reason says.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from orchestrator.outcomes import FOUND_AT_NEXT_START, FROM_JOURNAL, STOPPED_REASON, Outcome
from orchestrator.store.database import Store

_STOPPED = STOPPED_REASON.split("{why}")[0]  # classify/: the operator's stop, a signal
_ABORTED = (FOUND_AT_NEXT_START, FROM_JOURNAL)  # recovery.py: the farm died mid-run


@dataclass(frozen=True)
class NoVerdict:
    cause: str  # "node" (infra-error), "stopped", "aborted" or "unfinished" (a stage never finished)
    words: str  # what the index says of these cells
    count: int


def _cause(reason: str) -> tuple[str, str]:
    """A not-run result's cause and its words, from its stored reason."""
    if reason.startswith(_STOPPED):
        why = reason[len(_STOPPED) :].split(")", 1)[0]
        return "stopped", f"not-run: the run was stopped ({why}), not the node's doing"
    if reason.endswith(_ABORTED):
        return "aborted", "not-run: the run aborted (the farm was stopped) before they finished, not the node's doing"
    return "unfinished", f"not-run: {reason or 'no reason stored'}"


def no_verdict(store: Store, light: list[Any]) -> list[NoVerdict]:
    """The run's cells (light rows: id, run, kernel, variant, node, device, outcome) with no
    verdict, grouped by cause; the not-run ones' reasons read from their rows alone."""
    infra = sum(1 for row in light if row[6] == Outcome.INFRA_ERROR.value)
    not_run = [row[0] for row in light if row[6] == Outcome.NOT_RUN.value]
    causes: Counter[tuple[str, str]] = Counter()
    if not_run:
        causes.update(_cause(row.reason or "") for row in store.result_rows(not_run, json_as_text=True))
    found = [NoVerdict("node", "infra-error: the node, not the kernel", infra)] if infra else []
    return found + [NoVerdict(cause, words, n) for (cause, words), n in sorted(causes.items())]
