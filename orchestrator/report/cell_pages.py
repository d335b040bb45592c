"""The cell pages a render writes (site.py): cells/ID.html of every result the site links to.

A cell page shows one result and what came before it, never what came after, so once written it
cannot change: a page whose stamp (stamps.cell_stamp) is already on disk is not rendered again.
Those to write are read in batches of whole rows (BATCH), which bounds the memory, not the time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import Environment

from orchestrator.report import history
from orchestrator.report.cell_page import Chrome, cell_body, decoded
from orchestrator.report.model import ReportModel
from orchestrator.report.pagewriter import CHANGED, FRESH, PageWriter
from orchestrator.report.stamps import cell_stamp, stamped
from orchestrator.store.database import Store

BATCH = 500  # cell pages rendered per batch of whole rows read: bounds the memory, not the time


def _write(path: str, text: str, pages: PageWriter, fresh: bool) -> None:
    """Hands a cell page to the writer: `fresh`, one not on disk yet (written in place); else
    written whole by a rename, never compared (it lacks this stamp, so its bytes differ)."""
    pages.put(FRESH if fresh else CHANGED, path, text.encode("utf-8"))


def _linked_results(model: ReportModel) -> dict[int, int]:
    """result id -> run id of every cell page the site links to: the run's cells,
    each standing cell (and the infra result after it) and each certificate's
    evidence, from whichever run."""
    wanted = {r.id: r.run_id for r in model.results}
    for cell in model.standing.values():
        wanted[cell.result.id] = cell.result.run_id
        if cell.infra_since is not None:
            wanted[cell.infra_since.id] = cell.infra_since.run_id
    for entry in model.ledgers:
        for state in entry.capabilities.values():
            for cert in (*state.current, *state.older):
                wanted[cert.result_id] = cert.run_id
    return wanted


def _batches(ids: list[int]) -> Iterable[list[int]]:
    for start in range(0, len(ids), BATCH):
        yield ids[start : start + BATCH]


def write_cell_pages(
    store: Store,
    model: ReportModel,
    env: Environment,
    out_dir: Path,
    pages: PageWriter,
    also: dict[int, int],
    since: dict[int, list[str]],
) -> None:
    """Write the cell pages the site links to, and those of `also` (result id -> run id),
    that are not on disk yet (or were written by another version of the farm); `since`:
    what the matrix flags on each standing verdict (grids.since_by_result)."""
    wanted = {**also, **_linked_results(model)}
    states = store.run_states(sorted(set(wanted.values())))
    # what the matrix flags on a standing verdict, its page says too (and its stamp holds)
    stamps = {rid: cell_stamp(rid, run_id, *states[run_id][:2], since.get(rid, ())) for rid, run_id in wanted.items()}
    try:  # one listing instead of a failed open per page not written yet (the run's own, thousands)
        present = set(os.listdir(out_dir / "cells"))
    except OSError:
        present = set()
    todo = [
        rid
        for rid in sorted(wanted)
        if f"{rid}.html" not in present or not stamped(out_dir / "cells" / f"{rid}.html", stamps[rid])
    ]
    # the run's own cells' earlier results are in the model; the others' are read here
    others = [rid for rid in todo if rid not in model.previous and wanted[rid] != model.run.id]
    previous = {**store.previous_results(result_ids=others, per_cell=history.WINDOW), **model.previous}
    run_id = model.run.id
    chrome = Chrome(env)

    folder = os.path.join(out_dir, "cells")  # a string: a Path per page cost more than its page's write

    def make(batch: list[int]) -> Iterable[tuple[str, str, bool]]:
        """One batch's pages: (path, text, whether the file is new)."""
        rows = decoded(store.result_rows(batch, json_as_text=True))
        snapshots = store.snapshot_rows([r.snapshot_id for r in rows if r.snapshot_id is not None])
        measured: dict[int, list[Any]] = {}
        for m in store.metric_values(result_ids=[rid for rid in batch if wanted[rid] != run_id]):
            measured.setdefault(m.result_id, []).append(m)  # the run's own are in the model
        for r in rows:
            title = (
                f"farm: {r.kernel}:{r.variant}@{r.node}" + (f" [{r.device}]" if r.device else "") + f" (result {r.id})"
            )
            # the run's own cells were compared in the model already (its "what changed")
            change = model.changes.get((r.kernel, r.variant, r.node, r.device)) if r.run_id == run_id else None
            snapshot = snapshots.get(r.snapshot_id)
            values = model.measured.get(r.id, []) if r.run_id == run_id else measured.get(r.id, [])
            started, status, bisected, commit = states[r.run_id]  # the status as stamped, not the model's
            ended = status if status != "finished" else None
            prior, flags = previous.get(r.id, []), since.get(r.id, ())
            body = cell_body(r, started, prior, snapshot, change, values, ended, bisected, flags, commit)
            name = f"{int(r.id)}.html"
            yield f"{folder}/{name}", chrome.page(stamps[r.id], title, body), name not in present

    for batch in _batches(todo):
        for path, text, fresh in make(batch):
            _write(path, text, pages, fresh)  # not on disk, or without this stamp: it differs
