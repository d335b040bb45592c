"""The reviewers' site in reports/, rendered from the store alone (never from nodes).

    index.html            what changed since the last run, the capability matrix (the
                          fleet's standing: each cell's latest verdict from any run, with
                          its run and age), the certification ledger's verdicts, a legend
    cells/ID.html         one cell: provenance, build log, SASS counts, output
    kernels/KERNEL.html   certification per architecture, with the evidence; history
    nodes/NODE.html       the node's probe history (GPU, driver, nvcc over time)
    history.html          the last runs as a grid, each linked to its own matrix
    runs/ID.html          one run's own matrix (the rendered run's too)

Pages are static and self-contained (inline CSS, no scripts, fonts or CDNs), so
they open from disk and read without JavaScript. Everything nodes and kernels
printed is untrusted and autoescaped by Jinja2. Each page is written to a
temporary file and renamed, so a reader never sees half a page.
"""

from __future__ import annotations

import os
import re
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
    env.filters["age"] = _age
    env.globals["category"] = category
    return env


def _age(days: float) -> str:
    if days < 1 / 24:
        return "this run" if days < 1 / 1440 else f"{days * 1440:.0f} min before"
    if days < 2:
        return f"{days * 24:.0f} h before"
    return f"{days:.0f} d before"


def _write(path: Path, text: str) -> None:
    # one renderer at a time (the run lock, or a lone `farm report`), so a fixed
    # temporary name per page is enough; the rename makes each page appear whole.
    # An unchanged page is not rewritten: re-rendering the same database touches nothing.
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def page_name(text: str) -> str:
    """A file name for a node or kernel page: names were validated at load, but a
    database is input too, so never let stored text choose a path."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".") or "_"
    return safe[:80]


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
        # every certificate's evidence and every standing cell gets a page too, from whichever run it came
        shown = {r.id for r in model.results}
        certifying = {c.result_id for e in model.ledgers for s in e.capabilities.values() for c in s.current + s.older}
        standing = {c.result.id for c in model.standing.values()}
        standing |= {c.infra_since.id for c in model.standing.values() if c.infra_since is not None}
        extra = [r for rid in sorted((certifying | standing) - shown) if (r := store.result(rid)) is not None]
        extra_snaps = {s.id: s for s in store.snapshots_of(sorted({r.run_id for r in extra}))}
    env = _env()
    out_dir = Path(out_dir)
    run = model.run
    snap_by_id = {s.id: s for s in model.snapshots}
    several = model.several

    cell_page = env.get_template("cell.html.j2")
    snap_by_id = {**extra_snaps, **snap_by_id}
    for r in [*model.results, *extra]:
        key = (r.kernel, r.variant, r.node, r.device)
        _write(
            out_dir / "cells" / f"{int(r.id)}.html",
            cell_page.render(
                run=run,
                r=r,
                label=model.label(key),
                snapshot=snap_by_id.get(r.snapshot_id),
                change=model.changes.get(key) if r.run_id == run.id else None,
                history=model.cell_history.get(key, []),
                page_name=page_name,
            ),
        )

    kernel_page = env.get_template("kernel.html.j2")
    for entry in model.ledgers:
        cells = sorted(k for k in model.cell_history if k[0] == entry.kernel)
        _write(
            out_dir / "kernels" / f"{page_name(entry.kernel)}.html",
            kernel_page.render(
                run=run,
                entry=entry,
                cells=cells,
                several=several,
                cell_history=model.cell_history,
                runs=model.runs[:KERNEL_HISTORY_RUNS],
            ),
        )

    node_page = env.get_template("node.html.j2")
    for node, snaps in model.node_history.items():
        _write(out_dir / "nodes" / f"{page_name(node)}.html", node_page.render(run=run, node=node, snaps=snaps))

    run_page = env.get_template("run.html.j2")
    for past in model.runs:
        target = out_dir / "runs" / f"{int(past.id)}.html"
        if past.id != run.id and target.exists() and past.status != "running":
            continue  # a finished run's page never changes
        cells = model.run_cells.get(past.id, {})
        columns = sorted({(n, d) for (_k, _v, n, d) in cells})
        _write(
            target,
            run_page.render(
                run=past,
                cells=cells,
                counts=model.run_counts.get(past.id, {}),
                rows=sorted({(k, v) for (k, v, _n, _d) in cells}),
                columns=columns,
                several={n for n, _d in columns if sum(1 for m, _ in columns if m == n) > 1},
                linked=past.id == run.id,  # cell pages are written for the rendered run (and the matrix)
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
            model=model,
            counts=model.counts,
            total=len(model.results),
            changes=model.listed_changes,
            ledgers=model.ledgers,
            cell_ids={(r.kernel, r.variant, r.node, r.device): r.id for r in model.results},
            page_name=page_name,
        ),
    )
    return index
