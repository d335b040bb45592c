"""The reviewers' site in reports/, rendered from the store alone (never from nodes).

    index.html            what changed since the last run, the capability matrix,
                          the certification ledger's verdicts, a legend
    cells/ID.html         one cell: provenance, build log, SASS counts, output
    kernels/KERNEL.html   certification per architecture, with the evidence; history
    nodes/NODE.html       the node's probe history (GPU, driver, nvcc over time)
    history.html          the last runs as a grid, each linked to its own matrix
    runs/ID.html          an earlier run's matrix

Pages are static and self-contained (inline CSS, no scripts, fonts or CDNs), so
they open from disk and read without JavaScript. Everything nodes and kernels
printed is untrusted and autoescaped by Jinja2. Each page is written to a
temporary file and renamed, so a reader never sees half a page.
"""

from __future__ import annotations

import os
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from .config import Farm
from .reportdata import HISTORY_RUNS, category, collect
from .store import Store

KERNEL_HISTORY_RUNS = 10  # columns of a kernel page's history grid (history.html has all)


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("orchestrator", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["text"] = lambda data: (data or b"").decode("utf-8", "replace")
    env.filters["when"] = lambda dt: dt.strftime("%Y-%m-%d %H:%M") if dt else "–"
    env.globals["category"] = category
    return env


def _write(path: Path, text: str) -> None:
    # one renderer at a time (the run lock, or a lone `farm report`), so a fixed
    # temporary name per page is enough; the rename makes each page appear whole
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def render(
    store: Store,
    out_dir: Path,
    run_id: int | None = None,
    farm: Farm | None = None,
    history_runs: int = HISTORY_RUNS,
) -> Path:
    """Render the site for one run (default: the latest); returns index.html."""
    with store.reading():  # one snapshot, even while a run is writing
        model = collect(store, run_id, farm, history_runs)
        # every certificate's evidence gets a page too, from whichever run it came
        shown = {r.id for r in model.results}
        certifying = {c.result_id for e in model.ledgers for s in e.capabilities.values() for c in s.current + s.older}
        extra = [r for rid in sorted(certifying - shown) if (r := store.result(rid)) is not None]
        extra_snaps = {s.id: s for s in store.snapshots_of(sorted({r.run_id for r in extra}))}
    env = _env()
    out_dir = Path(out_dir)
    run = model.run
    snap_by_id = {s.id: s for s in model.snapshots}
    nodes = sorted(model.snapshots, key=lambda s: (s.cc is None, s.cc or "", s.node))
    rows: dict[tuple[str, str], dict] = {}
    for r in model.results:
        row = rows.setdefault(
            (r.kernel, r.variant),
            {"kernel": r.kernel, "variant": r.variant, "contract": r.contract, "cells": {}},
        )
        row["cells"][r.node] = r

    cell_page = env.get_template("cell.html.j2")
    snap_by_id = {**extra_snaps, **snap_by_id}
    for r in [*model.results, *extra]:
        _write(
            out_dir / "cells" / f"{r.id}.html",
            cell_page.render(
                run=run,
                r=r,
                snapshot=snap_by_id.get(r.snapshot_id),
                change=model.changes.get((r.kernel, r.variant, r.node)) if r.run_id == run.id else None,
                history=model.cell_history.get((r.kernel, r.variant, r.node), []),
            ),
        )

    kernel_page = env.get_template("kernel.html.j2")
    for entry in model.ledgers:
        cells = sorted(k for k in model.cell_history if k[0] == entry.kernel)
        _write(
            out_dir / "kernels" / f"{entry.kernel}.html",
            kernel_page.render(
                run=run,
                entry=entry,
                cells=cells,
                cell_history=model.cell_history,
                runs=model.runs[:KERNEL_HISTORY_RUNS],
            ),
        )

    node_page = env.get_template("node.html.j2")
    for node, snaps in model.node_history.items():
        _write(out_dir / "nodes" / f"{node}.html", node_page.render(run=run, node=node, snaps=snaps))

    run_page = env.get_template("run.html.j2")
    for past in model.runs:
        if past.id == run.id:
            continue
        target = out_dir / "runs" / f"{past.id}.html"
        if target.exists() and past.status != "running":
            continue  # a finished run's page never changes
        cells = model.run_cells.get(past.id, {})
        _write(
            target,
            run_page.render(
                run=past,
                cells=cells,
                counts=model.run_counts.get(past.id, {}),
                rows=sorted({(k, v) for (k, v, _n) in cells}),
                nodes=sorted({n for (_k, _v, n) in cells}),
            ),
        )

    _write(
        out_dir / "history.html",
        env.get_template("history.html.j2").render(
            run=run,
            runs=model.runs,
            counts=model.run_counts,
        ),
    )
    index = out_dir / "index.html"
    _write(
        index,
        env.get_template("index.html.j2").render(
            run=run,
            nodes=nodes,
            rows=[rows[k] for k in sorted(rows)],
            counts=model.counts,
            total=len(model.results),
            changes=model.listed_changes,
            ledgers=model.ledgers,
            cell_ids={(r.kernel, r.variant, r.node): r.id for r in model.results},
        ),
    )
    return index
