"""The HTML capability matrix, rendered from the store alone (never from live nodes).

reports/index.html is the latest run's matrix; reports/cells/RESULT_ID.html holds
each cell's provenance and logs. Pages are static, self-contained (inline CSS,
no scripts, no fonts or CDNs) and open from disk. Everything a kernel or node
printed is untrusted: Jinja2's autoescaping renders it as text.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from .errors import StoreError
from .outcomes import is_as_expected, is_infra
from .store import NodeSnapshotRow, ResultRow, Run, Store


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("orchestrator", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["text"] = lambda data: (data or b"").decode("utf-8", "replace")
    env.filters["seconds"] = lambda s: "" if s is None else f"{s:.1f} s"
    return env


@dataclass
class MatrixRow:
    kernel: str
    variant: str
    contract: str
    cells: dict[str, ResultRow]


def _category(result: ResultRow) -> str:
    if is_infra(result.outcome):
        return "infra"
    return "good" if is_as_expected(result.outcome) else "bad"


def _write(path: Path, text: str) -> None:
    # write-then-rename: a reader never sees a half-written page
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def render(store: Store, out_dir: Path, run_id: int | None = None) -> Path:
    """Render the matrix of one run (default: the latest); returns index.html."""
    run: Run | None = store.run(run_id) if run_id is not None else store.latest_run()
    if run is None:
        which = f"run {run_id}" if run_id is not None else "run"
        raise StoreError(f"no {which} in {store.url}: run `farm verify` first")
    results = store.results(run.id)
    snapshots: list[NodeSnapshotRow] = store.snapshots(run.id)
    env = _env()
    nodes = sorted(snapshots, key=lambda s: (s.cc is None, s.cc or "", s.node))
    rows: dict[tuple[str, str], MatrixRow] = {}
    for result in results:
        key = (result.kernel, result.variant)
        row = rows.setdefault(key, MatrixRow(result.kernel, result.variant, result.contract, {}))
        row.cells[result.node] = result
    counts = {"good": 0, "bad": 0, "infra": 0}
    for result in results:
        counts[_category(result)] += 1
    cell_template = env.get_template("cell.html.j2")
    snapshot_by_id = {s.id: s for s in snapshots}
    for result in results:
        _write(
            out_dir / "cells" / f"{result.id}.html",
            cell_template.render(
                run=run,
                r=result,
                snapshot=snapshot_by_id.get(result.snapshot_id),
                category=_category(result),
            ),
        )
    index = out_dir / "index.html"
    _write(
        index,
        env.get_template("index.html.j2").render(
            run=run,
            nodes=nodes,
            rows=[rows[k] for k in sorted(rows)],
            counts=counts,
            category=_category,
            total=len(results),
        ),
    )
    return index
