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
printed is untrusted: autoescaped by Jinja2, and escaped by escape.py where the
farm makes HTML itself, for speed (cell_page.py: cell pages; grids.py: matrices
and grids). Each page is written to a temporary file and renamed, so a reader never
sees half a page (but a new cell page, which nothing links to until the pages
written after it); pages go to disk from a writer process, in order (pagewriter.py).
One render at a time writes a folder, and reads the database once it holds it (site_lock.py).

Rendering is incremental and deterministic: a page is the same bytes whether the
folder was empty or kept from earlier renders. A cell page shows one result and
what came before it (never what came after), and a run's page one run, so once
written they cannot change: each carries a stamp (its result or run, that run's
start, and a digest of the templates and of the code that fills them; stamps.py; a
standing verdict's page also what the matrix flags on it: its job or inputs changed
since), and a page whose stamp is already on disk is not rendered again. A running run's
page is always rendered again. Index, kernel, node and history pages change with
every run and are rendered every time (and written only when their bytes differ).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import re
from collections import Counter
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from jinja2 import BytecodeCache, Environment, FileSystemBytecodeCache, PackageLoader, select_autoescape

from orchestrator import metrics
from orchestrator.config.farm import Farm
from orchestrator.errors import EXIT_CONFIG, FarmError, LockError
from orchestrator.report import grids, history, unfinished_cells
from orchestrator.report.card_heads import card_head, run_card
from orchestrator.report.cell_page import short_commit
from orchestrator.report.cell_pages import write_cell_pages
from orchestrator.report.escape import page_name
from orchestrator.report.escape import when as _when
from orchestrator.report.model import GRID_RUNS, HISTORY_RUNS, collect
from orchestrator.report.pagewriter import PAGE, PageWriter, WriteFailed, make_folders, write_page
from orchestrator.report.run_cards import run_cards
from orchestrator.report.site_identity import take_site
from orchestrator.report.site_lock import LOCK_FILE, rendering
from orchestrator.report.stamps import run_stamp, stamped
from orchestrator.report.standing import category
from orchestrator.report.unbacked import run_words
from orchestrator.store.database import Store
from orchestrator.terminal import card_text, printable_on_page

KERNEL_HISTORY_RUNS = GRID_RUNS  # columns of a kernel page's history grid (history.html has all)


def _bytecode_cache() -> BytecodeCache | None:
    """Jinja2's cache of compiled templates (in the temporary folder, per user, keyed
    by each template's source): compiling the six took ~0.1 s of every render. Any
    trouble with it, and the templates are compiled as before."""
    try:
        # the compiled code holds the environment's settings too (finalize), which the cache's key,
        # the template's name and source, does not: a farm whose settings changed (this module)
        # must not take an earlier farm's compiled templates
        return FileSystemBytecodeCache(pattern=f"__farm_jinja2_{_SETTINGS}_%s.cache")
    except (OSError, RuntimeError):  # no temporary folder of our own to be had
        return None


_SETTINGS = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("orchestrator.report", "templates"),
        bytecode_cache=_bytecode_cache(),
        autoescape=select_autoescape(["html", "j2"], default=True),
        auto_reload=False,  # one render, one version of the templates: no stat of base.html.j2 per page
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # every {{ }} of a page: a kernel's words with NUL, ESC or U+202E in them, shown as escapes (Markup is
    # the farm's own HTML, its untrusted parts already through _e)
    env.finalize = lambda value: printable_on_page(value) if type(value) is str else value
    env.filters.update(when=_when, age=grids.age_text, number=metrics.number, percent=metrics.percent)
    # a card's name where cards are told apart: look-alike letters shown as escapes (terminal.card_text)
    env.filters.update(card=card_text)
    # a run's farm commit on a line: "+dirty" kept where the tree was not its commit (red-team 216)
    env.filters.update(commit=short_commit)
    env.globals["category"] = category
    env.globals["card_head"] = card_head  # a column's card in words, on the index and run pages alike
    env.globals["regression_words"] = metrics.regression_words
    return env


class PageWriteError(FarmError):
    """A report page could not be written (a full disk, a read-only --out). Not an
    OSError, so the store's guard around the render does not take it for the
    database failing; the CLI says which folder. Exit 3: the reports folder is
    farm.yaml's `reports:` (or --out), the user's to fix."""

    exit_code = EXIT_CONFIG

    def __init__(self, path: str, err: OSError) -> None:
        super().__init__(f"{path}: {err.strerror or err}")
        self.path = path
        self.oserror = err


def _write(path: Path | str, text: str, pages: PageWriter) -> None:
    """Hands a page to the writer: written whole by a rename, and not at all when the page on
    disk has its bytes (cell pages are cell_pages.py's)."""
    pages.put(PAGE, os.fspath(path), text.encode("utf-8"))


def mark_unrendered(out_dir: Path, run_id: int | None, why: str) -> None:
    """index.html says run `run_id` has no report (`why`), or, where even that cannot be
    written (a full disk), is removed: never the night before's green over a run it does
    not show (a red-team finding: a red night whose render failed, or a farm killed before
    its start's render landed, left the last green index)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    run = f"Run {int(run_id)}" if run_id is not None else "A new run"
    page = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>farm: {run.lower()} not rendered</title>\n</head>\n<body>\n"
        f"<h1>{run}: no report</h1>\n<p>{run} {escape(printable_on_page(why))} ({stamp}).</p>\n"
        "<p>Nothing here is a verdict. <code>farm report</code> renders what the results database holds; "
        '<a href="history.html">the runs before</a>.</p>\n</body>\n</html>\n'
    )
    index = out_dir / "index.html"
    # after a render that holds the folder (its index last, over this one, was a green of a run before)
    with contextlib.ExitStack() as held:
        with contextlib.suppress(OSError, LockError):  # waited too long, or no folder yet: written all the same
            held.enter_context(rendering(out_dir))
        try:
            write_page(str(index), page.encode(), compare=False)
        except OSError:
            with contextlib.suppress(OSError):  # nothing more can be done for it
                index.unlink(missing_ok=True)
        words = f"{run} is newer than this page, and has no report: it {escape(printable_on_page(why))} ({stamp})"
        _flag_pages(out_dir, words)


_NEWER = re.compile(rb'<p class="flag" id="newer">[^\n]*</p>\n')


def _flag_pages(out_dir: Path, words: str) -> None:
    """The pages that show the site's present (kernels/, nodes/, history.html) say at their top that a
    newer run has no report: a kernel page opened from a bookmark read the night before's VERIFIED as
    current after a run with --no-report, or whose render failed (review 197). The next render writes
    them again without it. A page that cannot be read or written is left as it is."""
    banner = f'<p class="flag" id="newer">{words}. This page shows the runs before it.</p>\n'.encode()
    for path in [out_dir / "history.html", *out_dir.glob("kernels/*.html"), *out_dir.glob("nodes/*.html")]:
        with contextlib.suppress(OSError):
            page = _NEWER.sub(b"", path.read_bytes(), count=1)
            head, nav, rest = page.partition(b"</nav>\n")
            if nav:
                write_page(str(path), head + nav + banner + rest, compare=False)


def render(
    store: Store,
    out_dir: Path,
    run_id: int | None = None,
    farm: Farm | None = None,
    history_runs: int = HISTORY_RUNS,
    also: dict[int, int] | None = None,
) -> Path:
    """Render the site for one run (default: the fleet's latest); returns index.html.
    `also` (result id -> run id): cell pages to write besides those the site links to
    (a bisection's cell, in the site of the fleet's latest run)."""
    # A render makes 10^5-10^6 short-lived tuples, rows and strings while its model (the
    # run's cells, their histories, the standing) lives to the end: the cyclic collector
    # ran over all of it again and again, about a quarter of a render's time. Nothing a
    # render keeps needs it; whatever cycles it leaves are collected once it is back on.
    collecting = gc.isenabled()
    gc.disable()
    try:
        out_dir = Path(out_dir)
        made = [folder for folder in (out_dir, *out_dir.parents) if not folder.exists()]
        # made before the store's guard: an --out that cannot be written is the user's to fix, not the database's
        make_folders(str(out_dir))  # readable by all: the report is published (pagewriter.PAGE_MODE)
        try:
            with rendering(out_dir):  # the database is read once this render is the folder's only one
                pages = PageWriter()  # started now: it is ready by the time the first page is
                try:
                    index = _render(store, out_dir, run_id, farm, history_runs, pages, also or {})
                except BaseException:
                    pages.close(check=False)  # what was handed over is written; the render's own error is the one
                    raise
                try:
                    pages.close()
                except WriteFailed as err:
                    raise PageWriteError(err.path, err.oserror) from err
                return index
        except BaseException:
            # the folders it made and left empty go: `--run 77 --out DIR` of no such run left an empty DIR
            with contextlib.suppress(OSError):  # a folder this render made: no other render waits on its lock
                if made and [entry.name for entry in os.scandir(out_dir)] == [LOCK_FILE]:
                    (out_dir / LOCK_FILE).unlink()
            for folder in made:  # deepest first; one that holds a page stays, and so do those above it
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
    finally:
        if collecting:
            gc.enable()


def _render(
    store: Store,
    out_dir: Path,
    run_id: int | None,
    farm: Farm | None,
    history_runs: int,
    pages: PageWriter,
    also: dict[int, int],
) -> Path:
    """Makes the site's pages and hands them to `pages`, cell pages first (cell_pages.py)."""
    env = _env()
    with store.reading():  # one snapshot, even while a run is writing
        model = collect(store, run_id, farm, history_runs, full=False)
        run = model.run
        # the folder is this database's site, or its old pages go (site_identity.py): once the run is read
        why = "is being rendered from another results database (or an older copy) than this folder's pages were"
        take_site(out_dir, store.database_identity(), store, lambda: mark_unrendered(out_dir, run.id, why))
        # listed apart in history.html, those after the rendered run too: a walk rendered beside the
        # fleet's latest run left no word of its runs there (they are not the fleet's: a red-team finding)
        bisections = store.bisection_runs(limit=history_runs)
        # a run's passes that certify nothing (stand-in, farm writable): never green in history.html, said why
        unsure_counts = {k: run_words(n) for k, n in store.unconfirmed_reasons([r.id for r in model.runs]).items()}
        since = grids.since_by_result(model)
        # a flagged verdict is grey on its run's page and the kernel's history too (it was green there)
        moot = grids.flagged_by_run(model, since)
        write_cell_pages(store, model, env, out_dir, pages, also, since)

        # each run's planned cells with no result (a run still running, or whose farm died): its page draws
        # them and history.html counts them; a finished run's, where one lost a cell, on the rendered run's page
        missing_by_run = {
            past.id: model.unfinished if past.id == run.id else store.unfinished_cells(past.id)
            for past in model.runs
            if past.id == run.id or past.status != "finished"
        }
        run_page = env.get_template("run.html.j2")
        from_grid: dict[int, dict[history.CellKey, tuple[str, int]]] | None = None
        for past in model.runs:
            linked = past.id == run.id  # cell pages are written for the rendered run (and the matrix)
            stamp = run_stamp(past.id, past.started_at, past.status, linked, moot.get(past.id, frozenset()))
            target = out_dir / "runs" / f"{int(past.id)}.html"
            if past.status != "running" and stamped(target, stamp):
                continue  # a finished run's page never changes
            own = model.run_cells.get(past.id)
            if own is None and past.id in model.grid_run_ids:  # its cells were read with the kernel grids'
                if from_grid is None:
                    from_grid = grids.cells_by_run(model)
                own = from_grid.get(past.id, {})
            if own is None:  # an earlier run's page, not on disk yet: its cells from the index alone
                # unpacked as tuples: a Row's attributes cost more than its positions, times 10^5
                matrix = store.run_matrix([past.id])
                own = {(k, v, n, d): (outcome, rid) for rid, _run, k, v, n, d, outcome in matrix}
                unsure, waived = store.unconfirmed_results([past.id]), store.waived_results([past.id])
            else:
                unsure, waived = model.unconfirmed_ids, model.waived_ids
            unsure = unsure | moot.get(past.id, frozenset())
            if past.status != "finished":  # nothing of a run that did not finish certifies: no cell of it green
                unsure = unsure | {rid for _outcome, rid in own.values()}
            # the cells it planned and has no result for: a dead running run's page had left them out (review 259)
            missing = unfinished_cells.place(missing_by_run.get(past.id, []), {(n, d) for (_k, _v, n, d) in own})
            columns = sorted({(n, d) for (_k, _v, n, d) in [*own, *missing]})
            words = unfinished_cells.no_result_words(past.status)
            matrix = grids.run_matrix(own, columns, linked, unsure, waived, missing, words)
            _write(
                target,
                run_page.render(
                    stamp=stamp,
                    run=past,
                    matrix=matrix,
                    counts=unfinished_cells.page_counts(
                        model.run_counts.get(past.id, {}), model.run_not_run.get(past.id, 0), missing
                    ),
                    missing_words=words,
                    columns=columns,
                    # each card as the run's own probe read it, in the index's words (card_heads.py)
                    heads=[(n, d, run_card(model.node_history.get(n, ()), past.id, d)) for n, d in columns],
                    several={n for n, seen in Counter(n for n, _d in columns).items() if seen > 1},
                    linked=linked,
                ),
                pages,
            )

    kernel_page = env.get_template("kernel.html.j2")
    grid_runs = model.runs[:KERNEL_HISTORY_RUNS]
    for entry in model.ledgers:
        _write(
            out_dir / "kernels" / f"{page_name(entry.kernel)}.html",
            kernel_page.render(
                run=run,
                newer=model.newer,
                entry=entry,
                grid=grids.history_grid(model, entry.kernel, grid_runs, set(since)),
                runs=grid_runs,
                trends=grids.trend_rows(model.trends.get(entry.kernel, {})),
            ),
            pages,
        )

    node_page = env.get_template("node.html.j2")
    # every column's node has its page, which its head links to: a node out of the last runs (removed
    # or renamed in farm.yaml since) had none in a fresh folder, and a stale one in an old folder
    probed = {col.node: [col.snapshot] for col in model.columns if col.snapshot is not None}
    for node, snaps in {**probed, **model.node_history}.items():
        page = node_page.render(
            run=run, newer=model.newer, node=node, snaps=snaps, probes=grids.probe_rows(snaps), gone=model.departed
        )
        _write(out_dir / "nodes" / f"{page_name(node)}.html", page, pages)

    _write(
        out_dir / "history.html",
        env.get_template("history.html.j2").render(
            run=run,
            newer=model.newer,
            runs=model.runs,
            # infra-error apart from not-run, a dead run's cells with no result among them, as on its page (review 264)
            counts={
                r.id: unfinished_cells.page_counts(
                    model.run_counts.get(r.id, {}), model.run_not_run.get(r.id, 0), missing_by_run.get(r.id, [])
                )
                for r in model.runs
            },
            unconfirmed=unsure_counts,
            bisections=bisections,
            cards=run_cards(model.node_history),
        ),
        pages,
    )
    index = out_dir / "index.html"
    _write(
        index,
        env.get_template("index.html.j2").render(
            run=run,
            newer=model.newer,
            model=model,
            counts=model.counts,
            total=len(model.results) + len(model.unfinished),  # a cell the run never finished counts too
            changes=model.listed_changes,
            ledgers=model.ledgers,
            matrix=grids.standing_matrix(model, env),
            fleet=grids.standing_counts(model),
            cell_ids={(r.kernel, r.variant, r.node, r.device): r.id for r in model.results},
            caveats=grids.change_caveats(model, since),
            page_name=page_name,
        ),
        pages,
    )
    return index
