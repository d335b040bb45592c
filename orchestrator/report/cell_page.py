"""A cell page's body (one result, what came before it, its node, output, logs),
made in Python: a run writes a page per cell (thousands), and Jinja2's lookups,
filters and escapes made these pages most of a re-render. Text from the database
goes through escape.e; the page around it is base.html.j2's (Chrome).
"""

from __future__ import annotations

import functools
import json
from collections import namedtuple
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from jinja2 import Environment
from sqlalchemy import JSON

from orchestrator import metrics
from orchestrator.cuda_waiver import FLAG, was_waived
from orchestrator.outcomes import Outcome
from orchestrator.report import history
from orchestrator.report.escape import decoded_text, page_name, when
from orchestrator.report.escape import e as _e
from orchestrator.report.escape import ew as _ew
from orchestrator.report.model import unconfirmed
from orchestrator.report.standing import category
from orchestrator.report.unbacked import certifies_nothing_why
from orchestrator.store.tables import ResultRow
from orchestrator.terminal import card_text

_UNFINISHED = {"aborted": "did not finish", "running": "had not finished"}
UNCONFIRMED_TEXT = '<small class="flag">on a card the NVIDIA driver did not confirm: certifies nothing</small>'


# the results' JSON columns, read as text (Store.result_rows(json_as_text=True)) and decoded here
_JSON_COLUMNS = tuple(c.key for c in ResultRow.__table__.columns if isinstance(c.type, JSON))


@functools.lru_cache(maxsize=4096)
def _json(text: str) -> Any:
    # cached: a run's rows repeat a few dozen values (targets, sources, instructions); the
    # decoded values are shared between rows, so cell_body only reads them
    return json.loads(text)


@functools.lru_cache(maxsize=8)
def _row_type(keys: tuple[str, ...]) -> type:
    # a named tuple: made from a row's values at a fraction of a SimpleNamespace's cost
    return namedtuple("ResultText", keys)


def decoded(rows: list[Any]) -> list[Any]:
    """result_rows(json_as_text=True) rows with their JSON columns decoded (the
    database's own JSON decoding, where it did it, is kept), as named tuples."""
    if not rows:
        return []
    keys = tuple(rows[0]._fields)
    at = [keys.index(key) for key in _JSON_COLUMNS]
    make = _row_type(keys)._make
    decoded = []
    for row in rows:
        values = list(row)
        for i in at:
            if type(values[i]) is str:
                values[i] = _json(values[i])
        decoded.append(make(values))
    return decoded


def cell_body(
    r: Any,
    started: datetime,
    prior: list[tuple[int, str, int]],
    snapshot: Any,
    change: history.Change | None = None,
    measured: Iterable[Any] = (),
    unfinished: str | None = None,
    bisected: str | None = None,
    since: Sequence[str] = (),
    farm_commit: str | None = None,
) -> str:
    """A cell page's body: result `r` (a row of every column) of a run started at
    `started` with the farm at `farm_commit` (runs.farm_commit), after its cell's earlier
    results `prior` (oldest first), on the node as `snapshot` found it; `change` is r
    against `prior`, worked out when not given; `measured` its metric values (metric_values
    rows); `bisected`, for a bisection's run, the old commit it tested: said so, and
    compared with none of the fleet's results;
    `since`, what the matrix flags on it as the cell's standing verdict (grids.since_flags).

    Written here rather than as a template: a run writes a page per cell (thousands),
    and Jinja2 spends about a microsecond on each of a page's ~150 lookups, filter
    calls and escapes, which made these pages alone most of a re-render. Everything
    from the database goes through _e (page_name's and _when's output are safe by
    construction); the page around it is base.html.j2's."""
    if change is None:
        key = (r.kernel, r.variant, r.node, r.device)
        change = history.changes([(key, r.outcome)], {key: [(rid, outcome) for rid, outcome, _ in prior]})[key]
    unsure, unsure_text = (" unconfirmed", UNCONFIRMED_TEXT) if unconfirmed(r) else ("", "")
    if unconfirmed(r) and (r.farm_writable or not r.identity):  # where it ran, its inputs, its card: each said
        unsure_text = f'<small class="flag">{_e(certifies_nothing_why(r))}: certifies nothing</small>'
    if unfinished is not None and category(r.outcome) == "good":  # a page is written once: say how it stood then
        unsure = " unconfirmed"
        said = "did not finish" if unfinished == "aborted" else "had not finished when this page was written"
        unsure_text += f'<small class="flag">run {_e(r.run_id)} {said}: certifies nothing</small>'
    if bisected is not None:  # read as a nightly's, its old commit's result was the cell's "fixed" (a red-team finding)
        unsure_text += (
            f"<small class=\"flag\">a bisection's run of commit {_e(bisected)}: not the kernel's sources now, "
            "and compared with none of the fleet's runs</small>"
        )
    if was_waived(r):  # from results.cuda_waived, as the matrix flags it: the reason's words are no flag
        unsure_text += f'<small class="flag waived">{FLAG}</small>'
    for flag in since:  # grey, never green, as the matrix shows it (the stamp holds the flags)
        unsure = " unconfirmed" if category(r.outcome) == "good" else unsure
        unsure_text += f'<small class="flag rejudged">{_ew(flag)}</small>'
    card = f" ({_ew(card_text(r.device))})" if r.device else ""  # look-alike names read apart (red-team 210)
    out = [
        f'<p><a id="back" href="../index.html">back to the matrix</a> · '
        f'<a href="../kernels/{page_name(r.kernel)}.html">{_ew(r.kernel)}</a> · '
        f'<a href="../nodes/{page_name(r.node)}.html">{_ew(r.node)}</a></p>\n'
        f"<h1>{_ew(r.kernel)} : {_ew(r.variant)} on {_ew(r.node)}{card}</h1>\n"
        f'<table><tr><td class="{category(r.outcome)}{unsure}" id="outcome">'
        f'<span class="outcome">{_ew(r.outcome)}</span>'
        f"{f' at {_ew(r.failed_stage)}' if r.failed_stage else ''}{unsure_text}</td>\n"
        f"<td>expected {_ew(r.expected)}: {_ew(r.expected_reason)}</td></tr></table>\n"
        f"<p>{_ew(r.reason)}</p>\n"
    ]
    # against the cell's results before it, never after: the page cannot change once written
    if change.change and bisected is None:
        was = f" (was {_ew(change.previous)} in run {_e(change.previous_run)})" if change.previous else ""
        out.append(
            f'<p>Against this cell\'s earlier results: <span class="change">{_ew(change.change)}</span>{was}.</p>\n'
        )
    line = " · ".join(f"run {rid} {outcome}" for rid, outcome, _ in [*prior, (r.run_id, r.outcome, r.id)])
    said = "The fleet's results before it (other commits), then" if bisected else "History up to"
    out.append(f'<p class="meta">{said} this result (oldest first): {_e(line)}</p>\n')
    if r.known_failure_reason:  # a known failure's the one it matched, else each covering the cell (review 236)
        named = "Known failure declared" if r.outcome == Outcome.KNOWN_FAILURE else "Known failures declared here"
        out.append(f"<p><strong>{named}:</strong> {_ew(r.known_failure_reason)}</p>\n")
    identity = r.identity or "not identified (stored before the farm hashed every input): certifies nothing"
    out.append(
        '\n<h2>Provenance</h2>\n<dl class="kv">\n'
        f"<dt>result</dt><dd>{_e(r.id)} in run {_e(r.run_id)} (started {when(started)} UTC)</dd>\n"
        f"<dt>farm commit</dt><dd>{_ew(commit_text(farm_commit))}</dd>\n"
        f"<dt>contract</dt><dd>{_ew(r.contract)}</dd>\n"
        f"<dt>identity</dt><dd>{_ew(identity)}</dd>\n"
    )
    sources = r.sources or {}
    first = next(iter(sources), None)
    for path, sha in sources.items():
        term = "source" if path == first or str(path).endswith((".cu", ".cpp", ".cc")) else "file"
        out.append(f"<dt>{term}</dt><dd>{_ew(path)} sha256 {_ew(sha)}</dd>")
    for name, dep in (r.dependencies or {}).items():
        dep = dep or {}
        out.append(
            f"<dt>dependency</dt><dd>{_ew(name)} {_ew(dep.get('version') or '')} ({_ew(dep.get('origin'))}) "
            f"digest {_ew(dep.get('digest'))}</dd>"
        )
    if sources or r.dependencies:
        out.append("\n")
    cubins = ", ".join(map(str, r.elf_targets or [])) or "–"
    code = f"cubins {cubins}; PTX {', '.join(map(str, r.ptx_targets or [])) or '–'}"
    if r.code_path:
        code += f"; on this card: {r.code_path}"
    out.append(
        f"<dt>binary sha256</dt><dd>{_ew(r.binary_sha256 or '–')}</dd>\n"
        f"<dt>build command</dt><dd>{_e(r.build_command or '–')}</dd>\n"
        f"<dt>build reused</dt><dd>{'yes (unchanged since an earlier run)' if r.build_cached else 'no'}</dd>\n"
        f"<dt>machine code</dt><dd>{_ew(code)}</dd>\n"
    )
    s = snapshot
    if s is not None:
        if r.device:
            gpu = f"{_ew(card_text(r.device))}, CC {_ew(r.cc or '–')}"
            if r.gpu_index is not None:
                gpu += f", GPU {_e(r.gpu_index)} ({_e(r.gpu_uuid)})"
            if r.real_gpu:
                confirmed = "confirmed by the NVIDIA driver: real hardware"
            else:
                confirmed = "not confirmed by the NVIDIA driver: certifies nothing"
            gpu += f", driver {_ew(driver_text(s))}; {confirmed}"
        else:
            gpu = "none (compile-only)"
        mismatch = ' <span class="flag">differs from the probe</span>' if s.cc_mismatch else ""
        out.append(
            f"<dt>node</dt><dd>{_ew(s.node)} ({_ew(s.address)}, host {_ew(s.hostname or '–')}, "
            f"{_ew(s.os or '–')})</dd>\n"
            f"<dt>GPU</dt><dd>{gpu}</dd>\n"
            f"<dt>declared</dt><dd>{_ew(s.declared_gpu or '–')}, CC {_ew(s.declared_cc or '–')}{mismatch}</dd>\n"
            f"<dt>nvcc</dt><dd>{_ew(nvcc_text(s))}</dd>\n"
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
            f"<tr><td>{_ew(name)}</td><td>{_ew(info.get('status'))}</td><td>{_e(seconds.get(name, ''))}</td>"
            f"<td>{_e(info.get('detail'))}</td></tr>\n"
        )
    out.append(
        "</table>\n\n<h2>Instructions</h2>\n"
        '<table id="instructions"><tr><th>instruction</th><th>required at least</th><th>found</th></tr>\n'
    )
    counts = r.instruction_counts or {}
    for name, need in (r.required_instructions or {}).items():
        found = _ew(counts.get(name, "not inspected"))
        out.append(f"<tr><td>{_ew(name)}</td><td>{_ew(need)}</td><td>{found}</td></tr>\n")
    markers = r.markers or {}
    # a cell whose kernel never ran (its build failed) said "pass marker: not found (matched over the
    # whole stream)" of no stream at all (a review note, round 95)
    absent = "not found" if "run" in (r.stage_details or {}) else "not looked for: the kernel did not run"
    found_pass = f"stdout line {_e(markers['pass'])}" if markers.get("pass") else absent
    found_refusal = f"stderr line {_e(markers['refusal'])}" if markers.get("refusal") else absent
    out.append(
        '</table>\n\n<h2>Run</h2>\n<dl class="kv">'
        f"<dt>exit code</dt><dd>{_e(r.exit_code if r.exit_code is not None else 'not run')}</dd>\n"
        f"<dt>pass marker</dt><dd>{found_pass}{' (matched over the whole stream)' * (absent == 'not found')}</dd>\n"
        f"<dt>refusal marker</dt><dd>{found_refusal}</dd>\n"
    )
    if r.last_stderr_line:
        out.append(f"<dt>last stderr line</dt><dd>{_e(r.last_stderr_line)}</dd>\n")
    out.append("</dl>\n")
    out.append(speed_table(list(measured)))
    out.append(sanitizer_table(r.sanitizer or []))
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
        out.append(f'<pre id="{name}">{_e(decoded_text(data))}</pre>\n')
    out.append("<h2>Build log</h2>\n")
    if log_cut := cuts.get("build_log"):  # [start, end, size]: the log's size is in no column (file_ends.py)
        start, end, size = log_cut
        out.append(
            f'<p class="meta" id="build-log-cut">Cut: bytes {_e(start)} to {_e(end)} of {_e(size)} are left out '
            f"below (the first {_e(start)} and the last {_e(size - end)} bytes are kept).</p>\n"
        )
    out.append(f'<pre id="build-log">{_e(decoded_text(r.build_log))}</pre>\n')
    return "".join(out)


# the words `farm show` prints too (cli/results.py): a reviewer reads one cell in either, alike
def commit_text(farm_commit: str | None) -> str:
    """The farm's commit a result's run ran at (its kernels/ held the bytes the identity hashes)."""
    return farm_commit or "not recorded"


def short_commit(farm_commit: str | None) -> str:
    """A run's farm commit shortened for a line: its first 12 hex digits and what follows them
    ("+dirty": a tree that was not its commit). Cut at 12 characters, the "+dirty" went, and a
    certificate made by uncommitted code read as made at a commit anyone could check out (red-team 216)."""
    if not farm_commit:
        return "–"
    digest, plus, rest = farm_commit.partition("+")
    return digest[:12] + plus + rest


def driver_text(snapshot: Any) -> str:
    """The NVIDIA driver of the card's node, as its probe read it."""
    return snapshot.driver or "–"


def nvcc_text(snapshot: Any) -> str:
    """The node's nvcc, as its probe found it: its path and version."""
    return f"{snapshot.nvcc_path} ({snapshot.nvcc_version or 'not found'})"


def sanitizer_table(reports: list[dict[str, Any]]) -> str:
    """A cell page's compute-sanitizer runs: each tool, its count, its first findings, and where its
    log was cut (its head and tail read)."""
    if not reports:
        return ""
    out = [
        '<h3>compute-sanitizer</h3>\n<table id="sanitizer"><tr><th>tool</th><th>errors</th>'
        "<th>exit code</th><th>first findings</th></tr>\n"
    ]
    for one in reports:
        errors = "timed out" if one.get("timed_out") else one.get("errors")
        # the kernel under the tool (review 243): no pass marker there, or a tool that checked nothing
        unbacked = one.get("passed") is False or one.get("unchecked")
        flag = ' class="flag"' if one.get("timed_out") or one.get("errors") or one.get("exit_code") or unbacked else ""
        cut = _under_the_tool(one)
        if log_cut := one.get("log_cut"):  # [start, end, size]: its log past LOG_LIMIT (run/sanitize.py)
            start, end, size = log_cut
            cut += (
                f'<p class="meta" id="sanitizer-{_e(one.get("tool"))}-cut">Its log was cut: bytes {_e(start)} to '
                f"{_e(end)} of {_e(size)} were not read (its summary and last findings are from the last "
                f"{_e(size - end)} bytes).</p>"
            )
        out.append(
            f'<tr data-tool="{_e(one.get("tool"))}"><td>{_e(one.get("tool"))}</td><td{flag}>{_e(errors)}</td>'
            f"<td>{_e(one.get('exit_code'))}</td><td>{cut}<pre>{_e(one.get('findings') or '–')}</pre></td></tr>\n"
        )
    out.append("</table>\n")
    return "".join(out)


def _under_the_tool(one: dict[str, Any]) -> str:
    """What the kernel printed under a tool, where that backs no clean bill (untrusted, escaped)."""
    said = []
    if one.get("unchecked"):
        said.append(f"The tool instrumented no CUDA call: {one['unchecked']}")
    if one.get("passed") is False:
        said.append(
            f"No pass marker on the kernel's stdout under the tool (its last line: {one.get('last_line') or '–'})"
        )
    if said and one.get("said"):
        said.append(f"Its stderr there ended: {one['said']}")
    return "".join(f'<p class="meta" data-under="{_e(one.get("tool"))}">{_e(line)}</p>' for line in said)


def speed_table(measured: list[Any]) -> str:
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


class Chrome:
    """base.html.j2 around a cell page's stamp, title and body, rendered once per
    render: the page's style and navigation stay in the one template."""

    def __init__(self, env: Environment) -> None:
        child = (
            '{% extends "base.html.j2" %}{% set root = "../" %}'
            "{% block title %}\x00{% endblock %}{% block body %}\x00{% endblock %}"
        )
        # placeholders no page text holds: U+E001 for the stamp (an expression, which finalize would turn
        # a control character into an escape), \x00 for the title and the body (the child's own text)
        self.head, rest = env.from_string(child).render(stamp="\ue001").split("\ue001")
        self.after_stamp, self.after_title, self.tail = rest.split("\x00")

    def page(self, stamp: str, title: str, body: str) -> str:
        return f"{self.head}{_e(stamp)}{self.after_stamp}{_e(title)}{self.after_title}{body}{self.tail}"
