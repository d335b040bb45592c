"""A run page's cells with no result: those the run planned and never stored (a farm SIGKILLed
or whose host went down mid-run, before the next start stores them not-run), and its counts.

A run page drew its matrix from result rows alone, so a dead running run's page showed the cells
that had finished (grey passes) and not the ones it never finished: the page read as a smaller,
all-green run under its banner. Its counts lumped not-run with infra-error ("0 infra" beside two
missing cells), so an operator could not tell a stop's cells from a broken node's (review 259).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from orchestrator.report.escape import e as _e

CellKey = tuple[str, str, str, str]  # (kernel, variant, node, device), as history.CellKey

# why a planned cell has no result, by its run's status (the index's summary line says it so too)
_WHY = {
    "finished": "no result: planned, none stored (a bug in the farm)",
    "running": (
        "no result stored: the run has not finished (still running, or its farm or database failed; "
        "its journal may hold it)"
    ),
}


def no_result_words(status: str) -> str:
    return _WHY.get(status, "no result: the run did not finish")


def place(missing: Iterable[CellKey], columns: Iterable[tuple[str, str]]) -> list[CellKey]:
    """The cells of `missing`, each under a column of its page. A cell planned before its node's probe has
    no card (device ""): it goes under the node's one card, where the run found one (store/not_run_rows.py
    files its not-run row there too), not in a card-less column of its own."""
    cards = Counter(node for node, _device in columns)
    sole = {node: device for node, device in columns if cards[node] == 1}
    return [(k, v, n, sole[n]) if not d and n in sole else (k, v, n, d) for k, v, n, d in missing]


def no_result_td(kernel: str, variant: str, node: str, shown_device: str, linked: bool, words: str) -> str:
    """The cell of a planned cell with no result: not-run (never green), said why, with no link (it has no page).
    `linked`: the rendered run's matrix, whose cells carry data-node, data-device and data-cell."""
    data = (
        f' data-node="{_e(node)}" data-device="{shown_device}" data-cell="{_e(f"{kernel}:{variant}")}"'
        if linked
        else ""
    )
    return f'<td class="infra" data-no-result="1"{data}>not-run<small>{_e(words)}</small></td>'


def page_counts(counts: dict[str, int], not_run: int, missing: Sequence[CellKey]) -> dict[str, int]:
    """A run page's counts: infra-error apart from not-run, and not-run counting the planned cells with no
    result (as the JSON export's `not_run` does); `missing` of them are those with no row."""
    return {
        "good": counts.get("good", 0),
        "bad": counts.get("bad", 0),
        "infra_error": counts.get("infra", 0) - not_run,
        "not_run": not_run + len(missing),
        "missing": len(missing),
    }
