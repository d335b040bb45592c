"""What changed since the last run, cell by cell (after KernelCI's tree-compare).

A cell is a (kernel, variant, node, card model). Against its latest earlier *verdict*
(infra results carry none and are passed over), each cell of a run is:

    regression      was as expected, now is not
    fixed           was not as expected, now is
    still-failing   was not, still is not
    new             no earlier verdict, as expected now
    new-failure     no earlier verdict, not as expected now
    unstable        its verdict flipped more than once in the last 10 runs
    changed         as expected both times, but a different outcome (compile-only -> pass)
    unchanged       the same outcome
    infra           no verdict this run (the node failed)

A morning reader needs the first six; `unchanged` cells are not listed. A
perf-regression is not as expected, so a cell that passed before and is slower
now is a regression here; its figures, and instruction counts that moved since
the cell's previous result of the same inputs (sass_moves), are listed beside.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator import outcomes

# cached: a report compares thousands of cells against ten results each, and each
# check otherwise builds an Outcome from its text
is_as_expected = functools.cache(outcomes.is_as_expected)
is_infra = functools.cache(outcomes.is_infra)

WINDOW = 10
LISTED = ("regression", "new-failure", "unstable", "fixed", "still-failing", "new", "changed")

CellKey = tuple[str, str, str, str]  # kernel, variant, node, device (the card model, "" without a GPU)


@dataclass(frozen=True)
class Change:
    key: CellKey
    change: str
    outcome: str
    previous: str | None  # the earlier verdict compared against
    previous_run: int | None
    flips: int

    @property
    def label(self) -> str:
        kernel, variant, node, _device = self.key
        return f"{kernel}:{variant}@{node}"


def _flips(verdicts: list[bool]) -> int:
    return sum(1 for a, b in itertools.pairwise(verdicts) if a != b)


def changes(
    current: Iterable[tuple[CellKey, str]],
    earlier: dict[CellKey, list[tuple[int, str]]],
) -> dict[CellKey, Change]:
    """current: (cell, outcome) of the run; earlier: cell -> [(run_id, outcome)],
    oldest first, from runs before it."""
    result: dict[CellKey, Change] = {}
    for key, outcome in current:
        verdicts = [(run, o) for run, o in earlier.get(key, []) if not is_infra(o)]
        if is_infra(outcome):
            previous = verdicts[-1] if verdicts else (None, None)
            result[key] = Change(key, "infra", outcome, previous[1], previous[0], 0)
            continue
        good = is_as_expected(outcome)
        window = [*[is_as_expected(o) for _, o in verdicts][-(WINDOW - 1) :], good]
        flips = _flips(window)
        if not verdicts:
            change = "new" if good else "new-failure"
            result[key] = Change(key, change, outcome, None, None, 0)
            continue
        prev_run, prev = verdicts[-1]
        was_good = is_as_expected(prev)
        if flips > 1:
            change = "unstable"
        elif was_good and not good:
            change = "regression"
        elif not was_good and good:
            change = "fixed"
        elif not good:
            change = "still-failing"
        else:
            change = "unchanged" if prev == outcome else "changed"
        result[key] = Change(key, change, outcome, prev, prev_run, flips)
    return result


# results that carry no inspected binary: a cell's counts are compared with its last result that has one
NO_BINARY = frozenset({"infra-error", "not-run", "build-fail"})


def built_before(prior: list[tuple[int, str, int]]) -> tuple[int, str, int] | None:
    """The latest of a cell's earlier results (oldest first) that built a binary."""
    return next((e for e in reversed(prior) if e[1] not in NO_BINARY), None)


@dataclass(frozen=True)
class SassMove:
    """Instruction counts of a cell that moved since its previous result of the
    same inputs (the toolchain or the build flags changed the machine code)."""

    key: CellKey
    result_id: int
    previous_run: int
    moves: tuple[tuple[str, int, int], ...]  # (instruction, before, now)

    @property
    def words(self) -> str:
        return ", ".join(f"{name} {before} → {now}" for name, before, now in self.moves)


def sass_moves(
    current: Iterable[tuple[CellKey, int]],
    previous: dict[int, list[tuple[int, str, int]]],
    counts: dict[int, tuple[str | None, dict[str, int]]],
) -> list[SassMove]:
    """current: (cell, result id) of the run; previous: result id -> its cell's
    earlier results [(run, outcome, result id)], oldest first; counts: result id
    -> (identity, instruction -> count). Each cell is compared with its latest
    earlier result that built a binary, when both were inspected and both have
    the same, known inputs identity; only instructions counted in both count."""
    found = []
    for key, result_id in current:
        before = built_before(previous.get(result_id, []))
        if before is None or result_id not in counts or before[2] not in counts:
            continue
        identity, now = counts[result_id]
        was_identity, was = counts[before[2]]
        if identity is None or identity != was_identity:
            continue
        moved = tuple((name, was[name], now[name]) for name in sorted(now) if name in was and was[name] != now[name])
        if moved:
            found.append(SassMove(key, result_id, before[0], moved))
    return found
