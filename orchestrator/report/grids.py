"""The site's largest tables, made in Python to the bytes their templates made:
index.html's standing matrix, a run page's matrix, a kernel page's history grid
and speed rows, a node page's probe rows. A cold render holds 10^5 such cells,
and Jinja2 spent microseconds on each one's lookups, tests and escapes. Every
value from the database is escaped as the templates printed it (escape.py);
tests/test_report.py holds the matrix and the probe rows to the loops they replaced.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from jinja2 import Environment
from jinja2.filters import do_truncate
from markupsafe import Markup

from orchestrator import metrics
from orchestrator.cuda_waiver import FLAG, was_waived
from orchestrator.farm_writable import WHY
from orchestrator.outcomes import is_as_expected
from orchestrator.report import history, trends
from orchestrator.report.cell_page import _UNFINISHED
from orchestrator.report.durations import seconds
from orchestrator.report.escape import e as _e
from orchestrator.report.escape import page_name
from orchestrator.report.escape import t as _t
from orchestrator.report.model import ReportModel, unconfirmed
from orchestrator.report.standing import category
from orchestrator.report.unbacked import UNIDENTIFIED
from orchestrator.report.unfinished_cells import no_result_td
from orchestrator.terminal import card_text


def age_text(days: float) -> str:
    """How long before the shown run an earlier run's verdict was (the run's own cells
    show no age): "this run" would take a run started under a minute before for it."""
    if math.isinf(days):  # standing._days: its start is after this run's, from an earlier run
        return "age unknown: the farm host's clock was off"
    if days < 1 / 24:
        return "<1 min before" if days < 1 / 1440 else f"{days * 1440:.0f} min before"
    if days < 2:
        return f"{days * 24:.0f} h before"
    return f"{days:.0f} d before"


@functools.lru_cache(maxsize=256)
def _outcome_td(outcome: str | None, unsure: bool = False, waived: bool = False) -> str:
    # one per outcome word, escaped once: a kernel page's grid repeats a dozen words 10^4 times
    if not outcome:
        return '<td class="h none">–</td>'
    unsure = unsure and is_as_expected(outcome)  # _flagged: a fail or not-run is never green, nothing to ungreen
    # in words too, not grey alone: a reader of the text (a print, a screen reader, a copy) read a pass (review 97)
    said = (_UNSURE if unsure else "") + (_WAIVED if waived else "")
    return f'<td class="h {category(outcome)}{" unconfirmed" if unsure else ""}">{_e(outcome)}{said}</td>'


_UNSURE = "<small>certifies nothing</small>"  # a grey cell's words (run pages, history grids): never colour alone
# only on an as-expected verdict: every not-run and fail of a stopped run said "certifies nothing" too, noise
# around the run's one line that matters, its banner (review 253); those are never green to begin with
# a pass the CUDA-error rule did not look at, said as the index matrix says it (round 106: the run
# pages and the kernels' history grids showed it as a plain pass)
_WAIVED = f'<small class="flag waived">{FLAG}</small>'


def history_grid(
    model: ReportModel, kernel: str, runs: list[Any], flagged: set[int] | frozenset[int] = frozenset()
) -> list[tuple[str, Markup]]:
    """A kernel page's history grid: per cell, its label and its row of outcomes, one
    per run (oldest first), as HTML made here from escaped words (see _outcome_td);
    `flagged`: results whose job or inputs changed since (since_by_result), grey too."""
    several = model.several
    unsure, unfinished = model.unconfirmed_ids | flagged, model.unfinished_runs  # none is green: it certifies nothing
    waived = model.waived_ids
    columns = [r.id for r in reversed(runs)]
    grid = []
    for key in sorted(k for k in model.cell_history if k[0] == kernel):
        _kernel, variant, node, device = key
        by_run = {
            rid: (outcome, res in unsure or rid in unfinished, res in waived)
            for rid, outcome, res in model.cell_history[key]
        }
        label = f"{variant} @ {node}" + (f" [{device}]" if node in several and device else "")
        grid.append((label, Markup("".join(_outcome_td(*by_run.get(rid, (None, False, False))) for rid in columns))))
    return grid


def trend_rows(trends_by_metric: dict[str, list[trends.Series]]) -> list[tuple[str, list[trends.Series], Markup]]:
    """A kernel page's speed section: per metric, its series and their table rows
    (each cell's trend and latest value) as HTML made here, the bytes the template made."""
    shown = []
    for name, series in trends_by_metric.items():
        rows = []
        for s in series:
            latest = s.latest
            flag = ' <span class="flag">perf-regression</span>' if latest.regressed else ""
            if s.other_units:  # the job's `unit:` changed: the older values are not on this axis
                left = "; ".join(f"{n} earlier value{'s' * (n > 1)} in {unit}" for unit, n in s.other_units)
                flag += f"<small>{_t(left)} not drawn: the metric's unit changed</small>"
            rows.append(
                f"<tr><th>{_t(s.cell)}</th><td>{trends.svg(s)}</td><td>{_t(metrics.number(latest.value))} "
                f"{_t(s.unit)}{flag}<small>run {_t(latest.run_id)}</small></td></tr>\n"
            )
        shown.append((name, series, Markup("".join(rows))))
    return shown


_PROBED = ("gpu_name", "cc", "driver", "nvcc_version")  # a change from the run before is marked


def _probed(name: str, value: Any) -> Any:
    # a card's name with its look-alike letters as escapes (terminal.card_text), so two read apart
    return "–" if not value else card_text(value) if name == "gpu_name" else value


def probe_rows(snaps: list[Any]) -> Markup:
    """A node page's probe table rows, one per snapshot (oldest first), as HTML made
    here: the bytes the template made, at a fraction of its cost per value."""
    out = []
    prev = None
    for s in snaps:
        row = [f'<tr data-run="{_t(s.run_id)}">\n<td>{_t(s.run_id)}</td>\n']
        for name in _PROBED:
            value = getattr(s, name)
            if prev is not None and getattr(prev, name) != value:
                was = _probed(name, getattr(prev, name))
                row.append(f'<td class="flag" title="changed">{_t(_probed(name, value))} (was {_t(was)})</td>\n')
            else:
                row.append(f"<td>{_t(_probed(name, value))}</td>\n")
        differs = ' <span class="flag">differs</span>' if s.cc_mismatch else ""
        row.append(
            f"<td>{'yes' if s.real_gpu else 'no'}</td>\n"
            f"<td>{_t(s.declared_gpu or '–')}, CC {_t(s.declared_cc or '–')}{differs}</td>\n"
            f"<td>{_t(s.probe_error or 'ok')}</td>\n</tr>\n"
        )
        out.append("".join(row))
        prev = s
    return Markup("".join(out))


_NO_CELL = '<td class="none">–</td>'


@functools.lru_cache(maxsize=256)
def _run_td(outcome: str, unsure: bool = False, waived: bool = False) -> tuple[str, str]:
    """A plain run-page cell, per outcome word: its HTML before the result id and after
    it (made and escaped once: a cold render's 30 run pages hold 10^5 of them)."""
    unsure = unsure and is_as_expected(outcome)  # as _outcome_td
    words = f"{_e(outcome)}{_UNSURE if unsure else ''}{_WAIVED if waived else ''}"
    return f'<td class="{category(outcome)}{" unconfirmed" if unsure else ""}" title="result ', f'">{words}</td>'


def run_matrix(
    cells: dict[history.CellKey, tuple[str, int]],
    columns: list[tuple[str, str]],
    linked: bool,
    unsure: set[int],
    waived: set[int] | frozenset[int] = frozenset(),
    missing: Sequence[history.CellKey] = (),
    missing_words: str = "",
) -> list[tuple[str, str, Markup]]:
    """A run page's matrix: per (kernel, variant), its row of cells, one per column
    (node, card), as HTML made here from escaped text: a cold render has 10^5 cells,
    and a template spends microseconds on each. `linked`: each cell links to its page
    and carries data-node, data-device and data-cell (the rendered run's own matrix).
    `waived`: passes judged with the CUDA-error rule waived, flagged in words. `missing`: planned cells
    with no result (placed: unfinished_cells.place), not-run cells saying `missing_words` (review 259)."""
    at = {column: i for i, column in enumerate(columns)}
    shown = {column: _e(card_text(column[1])) for column in columns}  # data-device as the head shows it, once a column
    blank = [_NO_CELL] * len(columns)
    rows: dict[tuple[str, str], list[str]] = {}
    for (kernel, variant, node, device), (outcome, rid) in cells.items():
        row = rows.get((kernel, variant))
        if row is None:
            row = rows[(kernel, variant)] = blank.copy()
        if linked:
            flag = rid in unsure and is_as_expected(outcome)  # as _outcome_td
            row[at[(node, device)]] = (
                f'<td class="{category(outcome)}{" unconfirmed" if flag else ""}" '
                f'title="result {int(rid)}" data-node="{_e(node)}" '
                f'data-device="{shown[(node, device)]}" data-cell="{_e(f"{kernel}:{variant}")}">'
                f'<a href="../cells/{int(rid)}.html">{_e(outcome)}</a>{_UNSURE if flag else ""}'
                f"{_WAIVED if rid in waived else ''}</td>"
            )
        else:
            before, after = _run_td(outcome, rid in unsure, rid in waived)
            row[at[(node, device)]] = f"{before}{int(rid)}{after}"
    for kernel, variant, node, device in missing:  # a dead running run's page had left them out
        row = rows.setdefault((kernel, variant), blank.copy())
        td = no_result_td(kernel, variant, node, shown[(node, device)], linked, missing_words)
        row[at[(node, device)]] = td
    return [(kernel, variant, Markup("".join(rows[(kernel, variant)]))) for kernel, variant in sorted(rows)]


def changed_inputs(model: ReportModel, kernel: str, r: Any) -> bool:
    """The verdict `r` is about inputs that are no longer the kernel's (model.identities)."""
    return bool(r.identity) and model.identities.get(kernel, r.identity) != r.identity


def since_flags(model: ReportModel, r: Any) -> list[str]:
    """What the matrix flags on `r` where it is its cell's standing verdict: its inputs or its
    job changed since. Its cell page and `farm show` say it too: they said nothing of either
    while the matrix greyed the cell and the exports skipped it (a red-team finding)."""
    key = (r.kernel, r.variant, r.node, r.device)
    standing = model.standing.get(key)
    if standing is None or standing.result.id != r.id:
        return []  # a later result is the cell's verdict: the matrix flags that one
    flags = []
    if changed_inputs(model, r.kernel, standing.result):
        flags.append("inputs changed since: the kernel's sources, headers or dependencies are no longer these bytes")
    if moot := model.rejudged.get(key):
        flags.append(f"job changed since: {moot}")
    if left := model.left(r.node, r.device):
        flags.append(left)
    return flags


def since_by_result(model: ReportModel) -> dict[int, list[str]]:
    """result id -> since_flags of each standing verdict that has any."""
    return {c.result.id: flags for c in model.standing.values() if (flags := since_flags(model, c.result))}


def flagged_by_run(model: ReportModel, since: dict[int, list[str]]) -> dict[int, frozenset[int]]:
    """run -> its results in `since`: grey on the run's own page (and in its stamp), as on the matrix."""
    found: dict[int, set[int]] = defaultdict(set)
    for cell in model.standing.values():
        if cell.result.id in since:
            found[cell.result.run_id].add(cell.result.id)
    return {run_id: frozenset(ids) for run_id, ids in found.items()}


def standing_counts(model: ReportModel) -> dict[str, int]:
    """The fleet's standing counted as the matrix colours it: good, bad, infra, and
    "unconfirmed" (as expected, but greyed: a stand-in card, a run that did not finish).
    Said beside the run's own counts: a run of a subset after a red night read as the
    fleet green (a red-team finding)."""
    counts = {"good": 0, "bad": 0, "infra": 0, "unconfirmed": 0, "total": len(model.standing)}
    for key, s in model.standing.items():
        cat = category(s.result.outcome)
        # not what the course has now: its job or inputs changed, or its node left the fleet (fleet.py)
        moot = key in model.rejudged or changed_inputs(model, key[0], s.result) or model.left(key[2], key[3])
        if cat == "good" and (unconfirmed(s.result) or s.result.run_id in model.unfinished_runs or moot):
            cat = "unconfirmed"
        counts[cat] += 1
    return counts


def unconfirmed_why(r: Any) -> str:
    """Why an unconfirmed(r) verdict certifies nothing, each cause said: its card, where it ran
    (farm_writable.py), inputs the farm did not all identify."""
    return "; ".join(
        [
            *(["stand-in card"] if not r.real_gpu else []),
            *([WHY] if r.farm_writable else []),
            *([UNIDENTIFIED] if not r.identity else []),
        ]
    )


def change_caveats(model: ReportModel, since: dict[int, list[str]]) -> dict[history.CellKey, str]:
    """cell -> why the run's as-expected verdict, listed under "what changed", certifies nothing:
    "fixed: fail (run 1) → pass" of a stand-in card's pass read as the night's fix, the matrix's
    grey below it (review 234)."""
    unfinished = _UNFINISHED.get(model.run.status, "did not finish") if model.run.status != "finished" else ""
    caveats = {}
    for r in model.results:  # light rows: the card's and the runner's columns are the standing's
        key = (r.kernel, r.variant, r.node, r.device)
        if category(r.outcome) != "good":
            continue
        standing = model.standing.get(key)
        full = standing.result if standing is not None and standing.result.id == r.id else None
        unsure = unconfirmed_why(full) if full is not None and unconfirmed(full) else ""
        if not unsure and r.id in model.unconfirmed_ids:  # not its cell's standing verdict (never, but said)
            unsure = "a card the driver did not confirm, or run unconfined"
        why = [
            *([unsure] if unsure else []),
            *([f"run {r.run_id} {unfinished}"] if unfinished else []),
            *since.get(r.id, []),
        ]
        if why:
            caveats[key] = "; ".join(why)
    return caveats


def standing_matrix(model: ReportModel, env: Environment) -> Markup:
    """index.html's matrix rows (the fleet's standing), one <tr> per (kernel, variant)
    and a cell per column, as HTML made here: Jinja2 spent microseconds on each of a
    cell's dozen lookups, tests and escapes, times 10^3-10^4 cells. Every value from
    the database goes through _e; the bytes are those the template made."""
    run_id = model.run.id
    standing = model.standing
    # data-device as the head shows the card (card_text): a look-alike name's attribute read as the real one's
    heads = [(col.node, col.device, _t(col.node), _t(card_text(col.device))) for col in model.columns]
    out = []
    for kernel, variant, contract in model.rows:
        kernel_text, variant_text = _t(kernel), _t(variant)
        label = f"{kernel_text}:{variant_text}"
        out.append(
            f'<tr>\n<th><a href="kernels/{_t(page_name(kernel))}.html">{kernel_text}</a> : {variant_text}'
            f"<small>{_t(contract)}</small></th>\n"
        )
        for node, device, node_text, device_text in heads:
            s = standing.get((kernel, variant, node, device))
            if s is None:
                out.append('<td class="none">–</td>\n')
                continue
            r = s.result
            cat = category(r.outcome)
            # grey, flagged: no green for what certifies nothing (a stand-in card, a run that did not
            # finish: a killed night's passes stayed green once a later run had finished)
            unfinished = model.unfinished_runs.get(r.run_id)
            # judged against a job since changed (a raised `cc: min`, a variant gone): the jobs now
            # would not call it as expected, and it stayed green as current (a red-team finding)
            moot = model.rejudged.get((kernel, variant, node, device))
            # a verdict on bytes that are no longer the kernel's (an edited source, a new CUTLASS): those
            # bytes never ran there, and the cell stayed green under its flag (a red-team finding)
            changed = changed_inputs(model, kernel, r)
            # a node removed from farm.yaml, or a card its probe no longer finds: its green read as the
            # fleet's now (a red-team finding; the swapped card, review 240)
            left = model.departed.get(node)
            gone = None if left else model.gone_cards.get((node, device))
            if cat == "good" and (unconfirmed(r) or unfinished or moot or changed or left or gone):
                cat = "good unconfirmed"
            stale = " stale-cell" if s.stale or changed else ""
            cell = [
                f'<td class="{cat}{stale}" data-node="{node_text}" data-device="{device_text}" data-cell="{label}" '
                f'data-run="{_t(r.run_id)}"><a class="outcome" href="cells/{_t(r.id)}.html">{_t(r.outcome)}</a>\n'
            ]
            if cat == "infra":
                cell.append("<small>no verdict</small>")
            else:
                if r.outcome != r.expected:
                    cell.append(f"<small>expected {_t(r.expected)}</small>")
                if cat == "good unconfirmed" and unfinished:
                    said = _UNFINISHED.get(unfinished, "did not finish")
                    cell.append(f'<small class="flag">run {_t(r.run_id)} {_t(said)}: certifies nothing</small>')
                # its card, where it ran (farm_writable.py), or both: each said, and beside a run that did
                # not finish (one flag had hidden the other: review 141)
                if cat == "good unconfirmed" and unconfirmed(r):
                    cell.append(f'<small class="flag">{_t(unconfirmed_why(r))}: certifies nothing</small>')
                # a build that failed has no stderr line of the kernel's: its reason holds nvcc's error (round 95)
                said = r.last_stderr_line or (r.reason if r.outcome == "build-fail" else "")
                if cat == "bad" and said:
                    why = do_truncate(env, said, 90, True, "…")
                    cell.append(f'<small class="why">{_t(why)}</small>')
                if was_waived(r):  # green, but not a pass the CUDA-error rule looked at: said in words
                    cell.append(_WAIVED)
                if r.code_path == "ptx-jit":
                    cell.append("<small>ptx-jit</small>")
                if r.ended_at and r.started_at:
                    taken, stepped = seconds(r.started_at, r.ended_at)
                    cell.append("<small>? s (clock stepped)</small>" if stepped else f"<small>{taken:.1f} s</small>")
            age = f", {_t(age_text(s.age_days))}" if r.run_id != run_id else ""
            flag = ' <span class="flag">stale</span>' if s.stale else ""
            cell.append(f'<small class="age">run {_t(r.run_id)}{age}{flag}</small>\n')
            if changed:
                cell.append('<small class="flag">inputs changed since</small>\n')
            if moot:
                cell.append(f'<small class="flag rejudged">job changed since: {_t(moot)}</small>\n')
            if left:
                cell.append('<small class="flag departed">node not in the fleet now</small>\n')
            if gone:
                cell.append('<small class="flag gone-card">card not in the node now</small>\n')
            if cat == "good unconfirmed" and not (unfinished or unconfirmed(r)):
                # grey for a flag above alone: said as the run page says it, not by colour (review 234)
                cell.append('<small class="flag">so it certifies nothing</small>\n')
            if s.infra_since:
                then = s.infra_since
                cell.append(f'<small class="flag">then {_t(then.outcome)} in run {_t(then.run_id)}</small>')
            cell.append("</td>\n")
            out.append("".join(cell))
        out.append("</tr>\n")
    return Markup("".join(out))


def cells_by_run(model: ReportModel) -> dict[int, dict[history.CellKey, tuple[str, int]]]:
    """run -> cell -> (outcome, result id) of the kernel grids' runs, from the model's
    cell history (in id order: a cell's last result in a run wins, as in run_matrix)."""
    found: dict[int, dict[history.CellKey, tuple[str, int]]] = defaultdict(dict)
    for key, entries in model.cell_history.items():
        for run_id, outcome, result_id in entries:
            found[run_id][key] = (outcome, result_id)
    return found
