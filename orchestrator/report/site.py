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
printed is untrusted: autoescaped by Jinja2, and escaped by _e where report.py
makes HTML itself (cell pages, and the cells of run pages and kernel grids, for
speed). Each page is written to a temporary file and renamed, so a reader never
sees half a page.

Rendering is incremental and deterministic: a page is the same bytes whether the
folder was empty or kept from earlier renders. A cell page shows one result and
what came before it (never what came after), and a run's page one run, so once
written they cannot change: each carries a stamp (its result or run, that run's
start, and a digest of the templates and of the code that fills them), and a
page whose stamp is already on disk is not rendered again. A running run's page
is always rendered again. Index, kernel, node and history pages change with
every run and are rendered every time (and written only when their bytes differ).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from orchestrator import metrics
from orchestrator.config.farm import Farm
from orchestrator.errors import EXIT_CONFIG, FarmError
from orchestrator.report import history, trends
from orchestrator.report.model import GRID_RUNS, HISTORY_RUNS, ReportModel, category, collect
from orchestrator.store.database import Store

KERNEL_HISTORY_RUNS = GRID_RUNS  # columns of a kernel page's history grid (history.html has all)
BATCH = 500  # cell pages rendered per batch of whole rows read: bounds the memory, not the time
# what decides a page's bytes besides the database: a change to any of these renders every page again
PAGE_SOURCES = ("site.py", "model.py", "history.py", "trends.py", "../outcomes.py", "../metrics.py")


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("orchestrator.report", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        auto_reload=False,  # one render, one version of the templates: no stat of base.html.j2 per page
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["age"] = _age
    env.filters["number"] = metrics.number
    env.filters["percent"] = metrics.percent
    env.globals["category"] = category
    env.globals["trend_svg"] = trends.svg
    env.globals["regression_words"] = metrics.regression_words
    return env


@functools.lru_cache(maxsize=4096)
def _when(moment: datetime | None) -> str:
    # cached: a run's start is printed on each of its thousands of cell pages
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "–"


def _age(days: float) -> str:
    if days < 1 / 24:
        return "this run" if days < 1 / 1440 else f"{days * 1440:.0f} min before"
    if days < 2:
        return f"{days * 24:.0f} h before"
    return f"{days:.0f} d before"


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


def _write(path: Path, text: str, compare: bool = True) -> None:
    try:
        _write_page(path, text, compare)
    except OSError as err:
        raise PageWriteError(os.fspath(path), err) from err


def _write_page(path: Path, text: str, compare: bool) -> None:
    # one renderer at a time (the run lock, or a lone `farm report`), so a fixed
    # temporary name per page is enough; the rename makes each page appear whole
    # (a page's stamp is trusted only because no page is ever seen half-written).
    # An unchanged page is not rewritten: re-rendering the same database touches
    # nothing. `compare=False`: the caller knows the page on disk, if any, differs.
    data = text.encode("utf-8")
    name = os.fspath(path)
    try:
        if compare and os.stat(name).st_size == len(data):
            with open(name, "rb") as page:
                if page.read() == data:
                    return
    except FileNotFoundError:
        pass
    tmp = f"{name}.{os.getpid()}.tmp"
    try:
        page = open(tmp, "wb")  # noqa: SIM115 (closed below; the folder is made on the first page only)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(name), exist_ok=True)
        page = open(tmp, "wb")  # noqa: SIM115
    with page:
        page.write(data)
    os.replace(tmp, name)


@functools.lru_cache(maxsize=4096)
def page_name(text: str) -> str:
    """A file name for a node or kernel page: names were validated at load, but a
    database is input too, so never let stored text choose a path."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".") or "_"
    return safe[:80]


@functools.cache
def page_format() -> str:
    """A digest of the templates and of the code that fills them: part of every
    stamp, so pages written by another version of the farm are rendered again."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for path in [*sorted((here / "templates").glob("*.j2")), *(here / name for name in PAGE_SOURCES)]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _moment(started: datetime) -> str:
    # to the microsecond: with the id, it tells this run from another database's run of the same id
    moment = started if started.tzinfo else started.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def cell_stamp(result_id: int, run_id: int, started: datetime) -> str:
    return f"farm page {page_format()}: result {int(result_id)} of run {int(run_id)} started {_moment(started)}"


def run_stamp(run_id: int, started: datetime, status: str, linked: bool) -> str:
    state = f"{status}, {'linked' if linked else 'plain'}"
    return f"farm page {page_format()}: run {int(run_id)} started {_moment(started)}, {state}"


def _stamped(path: Path, stamp: str) -> bool:
    """Whether the page on disk carries this stamp: its second line (base.html.j2)."""
    try:
        with open(path, "rb") as page:
            head = page.read(1024)
    except OSError:
        return False
    lines = head.split(b"\n", 2)
    return len(lines) > 2 and lines[1] == f"<!-- {stamp} -->".encode()


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


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


_SPECIAL = re.compile(r"[&<>\"']")


def _e(value: Any) -> str:
    """Text for HTML, as Jinja2's autoescape prints it: str() of it, & < > " ' escaped
    (looked for first: most values have none, and one search is cheaper than five replaces)."""
    text = value if type(value) is str else str(value)
    return escape(text) if _SPECIAL.search(text) else text


def cell_body(
    r: Any,
    started: datetime,
    prior: list[tuple[int, str, int]],
    snapshot: Any,
    change: history.Change | None = None,
    measured: Iterable[Any] = (),
) -> str:
    """A cell page's body: result `r` (a row of every column) of a run started at
    `started`, after its cell's earlier results `prior` (oldest first), on the node
    as `snapshot` found it; `change` is r against `prior`, worked out when not given;
    `measured` its metric values (metric_values rows).

    Written here rather than as a template: a run writes a page per cell (thousands),
    and Jinja2 spends about a microsecond on each of a page's ~150 lookups, filter
    calls and escapes, which made these pages alone most of a re-render. Everything
    from the database goes through _e (page_name's and _when's output are safe by
    construction); the page around it is base.html.j2's."""
    if change is None:
        key = (r.kernel, r.variant, r.node, r.device)
        change = history.changes([(key, r.outcome)], {key: [(rid, outcome) for rid, outcome, _ in prior]})[key]
    out = [
        f'<p><a id="back" href="../index.html">back to the matrix</a> · '
        f'<a href="../kernels/{page_name(r.kernel)}.html">{_e(r.kernel)}</a> · '
        f'<a href="../nodes/{page_name(r.node)}.html">{_e(r.node)}</a></p>\n'
        f"<h1>{_e(r.kernel)} : {_e(r.variant)} on {_e(r.node)}{f' ({_e(r.device)})' if r.device else ''}</h1>\n"
        f'<table><tr><td class="{category(r.outcome)}" id="outcome"><span class="outcome">{_e(r.outcome)}</span>'
        f"{f' at {_e(r.failed_stage)}' if r.failed_stage else ''}</td>\n"
        f"<td>expected {_e(r.expected)}: {_e(r.expected_reason)}</td></tr></table>\n"
        f"<p>{_e(r.reason)}</p>\n"
    ]
    # against the cell's results before it, never after: the page cannot change once written
    if change.change:
        was = f" (was {_e(change.previous)} in run {_e(change.previous_run)})" if change.previous else ""
        out.append(
            f'<p>Against this cell\'s earlier results: <span class="change">{_e(change.change)}</span>{was}.</p>\n'
        )
    line = " · ".join(f"run {rid} {outcome}" for rid, outcome, _ in [*prior, (r.run_id, r.outcome, r.id)])
    out.append(f'<p class="meta">History up to this result (oldest first): {_e(line)}</p>\n')
    if r.known_failure_reason:
        out.append(f"<p><strong>Known failure declared:</strong> {_e(r.known_failure_reason)}</p>\n")
    identity = r.identity or "not identified (stored before the farm hashed every input): certifies nothing"
    out.append(
        '\n<h2>Provenance</h2>\n<dl class="kv">\n'
        f"<dt>result</dt><dd>{_e(r.id)} in run {_e(r.run_id)} (started {_when(started)} UTC)</dd>\n"
        f"<dt>contract</dt><dd>{_e(r.contract)}</dd>\n"
        f"<dt>identity</dt><dd>{_e(identity)}</dd>\n"
    )
    sources = r.sources or {}
    first = next(iter(sources), None)
    for path, sha in sources.items():
        term = "source" if path == first or str(path).endswith((".cu", ".cpp", ".cc")) else "file"
        out.append(f"<dt>{term}</dt><dd>{_e(path)} sha256 {_e(sha)}</dd>")
    for name, dep in (r.dependencies or {}).items():
        dep = dep or {}
        out.append(
            f"<dt>dependency</dt><dd>{_e(name)} {_e(dep.get('version') or '')} ({_e(dep.get('origin'))}) "
            f"digest {_e(dep.get('digest'))}</dd>"
        )
    if sources or r.dependencies:
        out.append("\n")
    cubins = ", ".join(map(str, r.elf_targets or [])) or "–"
    code = f"cubins {cubins}; PTX {', '.join(map(str, r.ptx_targets or [])) or '–'}"
    if r.code_path:
        code += f"; on this card: {r.code_path}"
    out.append(
        f"<dt>binary sha256</dt><dd>{_e(r.binary_sha256 or '–')}</dd>\n"
        f"<dt>build command</dt><dd>{_e(r.build_command or '–')}</dd>\n"
        f"<dt>build reused</dt><dd>{'yes (unchanged since an earlier run)' if r.build_cached else 'no'}</dd>\n"
        f"<dt>machine code</dt><dd>{_e(code)}</dd>\n"
    )
    s = snapshot
    if s is not None:
        if r.device:
            gpu = f"{_e(r.device)}, CC {_e(r.cc or '–')}"
            if r.gpu_index is not None:
                gpu += f", GPU {_e(r.gpu_index)} ({_e(r.gpu_uuid)})"
            if r.real_gpu:
                confirmed = "confirmed by the NVIDIA driver: real hardware"
            else:
                confirmed = "not confirmed by the NVIDIA driver: certifies nothing"
            gpu += f", driver {_e(s.driver or '–')}; {confirmed}"
        else:
            gpu = "none (compile-only)"
        mismatch = ' <span class="flag">differs from the probe</span>' if s.cc_mismatch else ""
        out.append(
            f"<dt>node</dt><dd>{_e(s.node)} ({_e(s.address)}, host {_e(s.hostname or '–')}, {_e(s.os or '–')})</dd>\n"
            f"<dt>GPU</dt><dd>{gpu}</dd>\n"
            f"<dt>declared</dt><dd>{_e(s.declared_gpu or '–')}, CC {_e(s.declared_cc or '–')}{mismatch}</dd>\n"
            f"<dt>nvcc</dt><dd>{_e(s.nvcc_path)} ({_e(s.nvcc_version or 'not found')})</dd>\n"
        )
        if s.probe_error:
            out.append(f'<dt>probe error</dt><dd class="flag">{_e(s.probe_error)}</dd>\n')
    out.append(
        "</dl>\n\n<h2>Stages</h2>\n"
        '<table id="stages"><tr><th>stage</th><th>status</th><th>seconds</th><th>detail</th></tr>\n'
    )
    seconds = r.stage_seconds or {}
    for name, info in (r.stage_details or {}).items():
        info = info or {}
        out.append(
            f"<tr><td>{_e(name)}</td><td>{_e(info.get('status'))}</td><td>{_e(seconds.get(name, ''))}</td>"
            f"<td>{_e(info.get('detail'))}</td></tr>\n"
        )
    out.append(
        "</table>\n\n<h2>Instructions</h2>\n"
        '<table id="instructions"><tr><th>instruction</th><th>required at least</th><th>found</th></tr>\n'
    )
    counts = r.instruction_counts or {}
    for name, need in (r.required_instructions or {}).items():
        out.append(f"<tr><td>{_e(name)}</td><td>{_e(need)}</td><td>{_e(counts.get(name, 'not inspected'))}</td></tr>\n")
    markers = r.markers or {}
    found_pass = f"stdout line {_e(markers['pass'])}" if markers.get("pass") else "not found"
    found_refusal = f"stderr line {_e(markers['refusal'])}" if markers.get("refusal") else "not found"
    out.append(
        '</table>\n\n<h2>Run</h2>\n<dl class="kv">'
        f"<dt>exit code</dt><dd>{_e(r.exit_code if r.exit_code is not None else 'not run')}</dd>\n"
        f"<dt>pass marker</dt><dd>{found_pass} (matched over the whole stream)</dd>\n"
        f"<dt>refusal marker</dt><dd>{found_refusal}</dd>\n"
    )
    if r.last_stderr_line:
        out.append(f"<dt>last stderr line</dt><dd>{_e(r.last_stderr_line)}</dd>\n")
    out.append("</dl>\n")
    out.append(_speed_table(list(measured)))
    out.append(_sanitizer_table(r.sanitizer or []))
    cuts = r.output_cuts or {}
    for name, data, size, sha in (
        ("stdout", r.stdout, r.stdout_size, r.stdout_sha256),
        ("stderr", r.stderr, r.stderr_size, r.stderr_sha256),
    ):
        digest = f", sha256 {_e(sha[:16])}…" if sha else ""
        out.append(f"<h3>{name} ({_e(size)} bytes{digest})</h3>\n")
        cut = cuts.get(name)
        if cut:
            out.append(
                f'<p class="meta" id="{name}-cut">Cut: bytes {_e(cut[0])} to {_e(cut[1])} of {_e(size)} are left '
                f"out below (the first {_e(cut[0])} and the last {_e(size - cut[1])} bytes are kept); the markers "
                "were matched over all of it.</p>\n"
            )
        out.append(f'<pre id="{name}">{_e(_text(data))}</pre>\n')
    out.append(f'<h2>Build log</h2>\n<pre id="build-log">{_e(_text(r.build_log))}</pre>\n')
    return "".join(out)


def _sanitizer_table(reports: list[dict[str, Any]]) -> str:
    """A cell page's compute-sanitizer runs: each tool, its count, and its first findings."""
    if not reports:
        return ""
    out = [
        '<h3>compute-sanitizer</h3>\n<table id="sanitizer"><tr><th>tool</th><th>errors</th>'
        "<th>exit code</th><th>first findings</th></tr>\n"
    ]
    for one in reports:
        errors = "timed out" if one.get("timed_out") else one.get("errors")
        flag = ' class="flag"' if one.get("timed_out") or one.get("errors") or one.get("exit_code") else ""
        out.append(
            f'<tr data-tool="{_e(one.get("tool"))}"><td>{_e(one.get("tool"))}</td><td{flag}>{_e(errors)}</td>'
            f"<td>{_e(one.get('exit_code'))}</td><td><pre>{_e(one.get('findings') or '–')}</pre></td></tr>\n"
        )
    out.append("</table>\n")
    return "".join(out)


def _speed_table(measured: list[Any]) -> str:
    """A cell page's metrics: each value, the median it was judged against, and how it was read."""
    if not measured:
        return ""
    out = [
        '<h3>Speed</h3>\n<table id="metrics"><tr><th>metric</th><th>value</th>'
        f"<th>median of the {metrics.BASELINE} before</th><th>verdict</th><th>read</th></tr>\n"
    ]
    for m in measured:
        value = f"{metrics.number(m.value)} {m.unit}" if m.value is not None else "no value"
        median = metrics.number(m.baseline) if m.baseline is not None else "–"
        if m.value is None:
            verdict = "–"
        elif m.regressed:
            verdict = f"perf-regression ({m.better} is better; tolerance {metrics.percent(m.tolerance)})"
        elif m.baseline is None:
            verdict = f"no verdict (fewer than {metrics.BASELINE} earlier values)"
        else:
            verdict = f"within {metrics.percent(m.tolerance)}"
        out.append(
            f'<tr data-metric="{_e(m.name)}"><td>{_e(m.name)}</td><td>{_e(value)}</td><td>{_e(median)}</td>'
            f"<td>{_e(verdict)}</td><td>{_e(m.note)}</td></tr>\n"
        )
    out.append("</table>\n")
    return "".join(out)


class _Chrome:
    """base.html.j2 around a cell page's stamp, title and body, rendered once per
    render: the page's style and navigation stay in the one template."""

    def __init__(self, env: Environment) -> None:
        child = (
            '{% extends "base.html.j2" %}{% set root = "../" %}'
            "{% block title %}\x00{% endblock %}{% block body %}\x00{% endblock %}"
        )
        # placeholders no page text holds: \x01 for the stamp, \x00 for the title and the body
        self.head, rest = env.from_string(child).render(stamp="\x01").split("\x01")
        self.after_stamp, self.after_title, self.tail = rest.split("\x00")

    def page(self, stamp: str, title: str, body: str) -> str:
        return f"{self.head}{_e(stamp)}{self.after_stamp}{_e(title)}{self.after_title}{body}{self.tail}"


def _cell_pages(store: Store, model: ReportModel, env: Environment, out_dir: Path) -> None:
    """Write the cell pages the site links to that are not on disk yet (or were
    written by another version of the farm)."""
    wanted = _linked_results(model)
    starts = store.run_starts(sorted(set(wanted.values())))
    stamps = {rid: cell_stamp(rid, run_id, starts[run_id]) for rid, run_id in wanted.items()}
    todo = [rid for rid in sorted(wanted) if not _stamped(out_dir / "cells" / f"{rid}.html", stamps[rid])]
    # the run's own cells' earlier results are in the model; the others' are read here
    others = [rid for rid in todo if rid not in model.previous and wanted[rid] != model.run.id]
    previous = {**store.previous_results(result_ids=others, per_cell=history.WINDOW), **model.previous}
    run_id = model.run.id
    chrome = _Chrome(env)
    for batch in _batches(todo):
        rows = store.result_rows(batch)
        snapshots = store.snapshot_rows([r.snapshot_id for r in rows if r.snapshot_id is not None])
        measured: dict[int, list[Any]] = {}
        for m in store.metric_values(result_ids=batch):
            measured.setdefault(m.result_id, []).append(m)
        for r in rows:
            title = (
                f"farm: {r.kernel}:{r.variant}@{r.node}" + (f" [{r.device}]" if r.device else "") + f" (result {r.id})"
            )
            # the run's own cells were compared in the model already (its "what changed")
            change = model.changes.get((r.kernel, r.variant, r.node, r.device)) if r.run_id == run_id else None
            snapshot = snapshots.get(r.snapshot_id)
            body = cell_body(r, starts[r.run_id], previous.get(r.id, []), snapshot, change, measured.get(r.id, []))
            _write(
                out_dir / "cells" / f"{int(r.id)}.html",
                chrome.page(stamps[r.id], title, body),
                compare=False,  # not on disk, or without this stamp: its bytes differ
            )


@functools.lru_cache(maxsize=256)
def _outcome_td(outcome: str | None) -> str:
    # one per outcome word, escaped once: a kernel page's grid repeats a dozen words 10^4 times
    if not outcome:
        return '<td class="h none">–</td>'
    return f'<td class="h {category(outcome)}">{_e(outcome)}</td>'


def _grid(model: ReportModel, kernel: str, runs: list[Any]) -> list[tuple[str, Markup]]:
    """A kernel page's history grid: per cell, its label and its row of outcomes, one
    per run (oldest first), as HTML made here from escaped words (see _outcome_td)."""
    several = model.several
    columns = [r.id for r in reversed(runs)]
    grid = []
    for key in sorted(k for k in model.cell_history if k[0] == kernel):
        _kernel, variant, node, device = key
        by_run = {rid: outcome for rid, outcome, _res in model.cell_history[key]}
        label = f"{variant} @ {node}" + (f" [{device}]" if node in several and device else "")
        grid.append((label, Markup("".join(_outcome_td(by_run.get(rid)) for rid in columns))))
    return grid


def _run_matrix(
    cells: dict[history.CellKey, tuple[str, int]], columns: list[tuple[str, str]], linked: bool
) -> list[tuple[str, str, Markup]]:
    """A run page's matrix: per (kernel, variant), its row of cells, one per column
    (node, card), as HTML made here from escaped text: a cold render has 10^5 cells,
    and a template spends microseconds on each. `linked`: each cell links to its page
    and carries data-node, data-device and data-cell (the rendered run's own matrix)."""
    heads = [(node, device, _e(node), _e(device)) for node, device in columns]
    matrix = []
    for kernel, variant in sorted({(k, v) for (k, v, _n, _d) in cells}):
        label = _e(f"{kernel}:{variant}")
        row = []
        for node, device, node_text, device_text in heads:
            found = cells.get((kernel, variant, node, device))
            if found is None:
                row.append('<td class="none">–</td>')
                continue
            outcome, rid = found
            head = f'<td class="{category(outcome)}" title="result {int(rid)}"'
            if linked:
                row.append(
                    f'{head} data-node="{node_text}" data-device="{device_text}" data-cell="{label}">'
                    f'<a href="../cells/{int(rid)}.html">{_e(outcome)}</a></td>'
                )
            else:
                row.append(f"{head}>{_e(outcome)}</td>")
        matrix.append((kernel, variant, Markup("".join(row))))
    return matrix


def render(
    store: Store,
    out_dir: Path,
    run_id: int | None = None,
    farm: Farm | None = None,
    history_runs: int = HISTORY_RUNS,
) -> Path:
    """Render the site for one run (default: the latest); returns index.html."""
    env = _env()
    out_dir = Path(out_dir)
    # made before the store's guard: an --out that cannot be written is the user's to fix, not the database's
    out_dir.mkdir(parents=True, exist_ok=True)
    with store.reading():  # one snapshot, even while a run is writing
        model = collect(store, run_id, farm, history_runs, full=False)
        run = model.run
        _cell_pages(store, model, env, out_dir)

        run_page = env.get_template("run.html.j2")
        for past in model.runs:
            linked = past.id == run.id  # cell pages are written for the rendered run (and the matrix)
            stamp = run_stamp(past.id, past.started_at, past.status, linked)
            target = out_dir / "runs" / f"{int(past.id)}.html"
            if past.status != "running" and _stamped(target, stamp):
                continue  # a finished run's page never changes
            own = model.run_cells.get(past.id)
            if own is None:  # an earlier run's page, not on disk yet: its cells from the index alone
                # unpacked as tuples: a Row's attributes cost more than its positions, times 10^5
                matrix = store.run_matrix([past.id])
                own = {(k, v, n, d): (outcome, rid) for rid, _run, k, v, n, d, outcome in matrix}
            columns = sorted({(n, d) for (_k, _v, n, d) in own})
            matrix = _run_matrix(own, columns, linked)
            _write(
                target,
                run_page.render(
                    stamp=stamp,
                    run=past,
                    matrix=matrix,
                    counts=model.run_counts.get(past.id, {}),
                    columns=columns,
                    several={n for n, _d in columns if sum(1 for m, _ in columns if m == n) > 1},
                    linked=linked,
                ),
            )

    kernel_page = env.get_template("kernel.html.j2")
    grid_runs = model.runs[:KERNEL_HISTORY_RUNS]
    for entry in model.ledgers:
        _write(
            out_dir / "kernels" / f"{page_name(entry.kernel)}.html",
            kernel_page.render(
                run=run,
                entry=entry,
                grid=_grid(model, entry.kernel, grid_runs),
                runs=grid_runs,
                trends=model.trends.get(entry.kernel, {}),
            ),
        )

    node_page = env.get_template("node.html.j2")
    for node, snaps in model.node_history.items():
        _write(out_dir / "nodes" / f"{page_name(node)}.html", node_page.render(run=run, node=node, snaps=snaps))

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
