"""`farm verify`: a run of the selected cells, stored as they end, rendered at its start and end."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.errors import EXIT_INFRA, ConfigError, FarmError, StoreError
from orchestrator.guarded import aside
from orchestrator.outcomes import STAGES, is_as_expected
from orchestrator.run.summary import NextSteps, NullListener, RunSummary, counts_text
from orchestrator.terminal import card_text, printable

if TYPE_CHECKING:  # the pipeline's modules are imported by the commands that use them: `farm --help` needs none
    from orchestrator.config.farm import Farm
    from orchestrator.report.history import Change
    from orchestrator.report.model import ReportModel
    from orchestrator.store.database import Store

from orchestrator.cli.base import (
    EXIT_MEANING,
    _check_trigger,
    _load,
    database_origin,
    farm_options,
    handle_errors,
    main,
    wait_option,
)
from orchestrator.cli.farm_now import farm_now
from orchestrator.cli.logfile import failure_logged, load_failure_logged, open_log
from orchestrator.cli.prerun import stop_before_run
from orchestrator.cli.run_signals import stopping_on_signals


def verdict_line(summary: RunSummary) -> str:
    from orchestrator.progress import certify_nothing_counts  # rich: not for `farm --help`

    # "as expected" on stand-in cards alone read as a green night in CI (a red-team finding); so did
    # passes that ran unconfined on the farm's own machine (review 141)
    note = certify_nothing_counts(summary.results, "on cards the NVIDIA driver did not confirm (stand-in)")
    meaning = EXIT_MEANING[summary.exit_code]
    if summary.stopped and summary.exit_code == EXIT_INFRA:
        # a stopped run's exit 4 had read "every verdict as expected, but some cells could not run (infra)" (review 253)
        meaning = f"the run did not finish: stopped by {summary.stopped}; not green"
    return (
        f"run {summary.run_id}: {summary.as_expected} as expected, {summary.unexpected} not, "
        f"{counts_text(summary)}; exit {summary.exit_code} ({meaning}){note}"
    )


def _change_line(change: Change, model: ReportModel, run_id: int) -> str:
    """A --quiet line: the change, and for a cell not as expected why and the `farm show ID` that
    prints the rest, as its progress line says (the cron mail said neither: review 179)."""
    was = f"{change.previous} (run {change.previous_run}) -> " if change.previous else ""
    # the model's label names the card on a node of several (Change.label does not): two cards' changes read alike
    line = f"{change.change}: {model.label(change.key)}: {was}{change.outcome}"
    result_id = model.run_cells.get(run_id, {}).get(change.key, ("", None))[1]
    if result_id is not None and not is_as_expected(change.outcome):
        reason = next((r.reason for r in model.results if r.id == result_id), None)
        line += f": {reason} (farm show {result_id})" if reason else f" (farm show {result_id})"
    return printable(line, keep_newlines=False)


def _matrix_text(summary: RunSummary) -> str:
    columns = sorted({(cell.node, cell.device, cell.several) for cell, _, _ in summary.results})
    rows = sorted({(cell.kernel, cell.variant) for cell, _, _ in summary.results})
    by_key = {(c.kernel, c.variant, c.node, c.device): r for c, r, _ in summary.results}
    # a node's card names come from the node: shown as text, never as the terminal's commands
    rows = [(printable(k, keep_newlines=False), printable(v, keep_newlines=False), (k, v)) for k, v in rows]
    first = max([len(f"{k}:{v}") for k, v, _ in rows] + [14])
    # a card as terminal.card_text shows it: "NVIDIA \u041d100" headed a column reading "NVIDIA H100" (review 213)
    names = {
        (n, d): printable(f"{n}[{card_text(d)}]" if several else n, keep_newlines=False) for n, d, several in columns
    }
    widths = {key: max(len(name), 18) for key, name in names.items()}
    lines = ["kernel:variant".ljust(first) + "  " + "  ".join(names[k].ljust(widths[k]) for k in names)]
    for shown_kernel, shown_variant, (kernel, variant) in rows:
        cells = []
        for node, device in names:
            result = by_key.get((kernel, variant, node, device))
            text = result.verdict.outcome.value if result and result.verdict else "-"
            cells.append(text.ljust(widths[(node, device)]))
        lines.append(f"{shown_kernel}:{shown_variant}".ljust(first) + "  " + "  ".join(cells))
    return "\n".join(lines)


@main.command()
@click.argument("selectors", nargs=-1, metavar="[KERNEL[:VARIANT]]...")
@click.option("--all", "all_", is_flag=True, help="Every variant of every kernel.")
@click.option(
    "--node",
    "nodes",
    multiple=True,
    metavar="NAME",
    help="Only this node (repeatable); default every enabled node.",
)
@click.option(
    "--trigger",
    default="manual",
    show_default=True,
    envvar="FARM_TRIGGER",
    callback=lambda _ctx, _param, value: _check_trigger(value),
    help="Recorded with the run: manual, cron, ci... (at most 32 characters).",
)
@click.option("--no-report", is_flag=True, help="Do not render reports/ after the run.")
@click.option(
    "--quiet",
    is_flag=True,
    help="Print only what changed since the last run and the exit code's meaning (for cron mail).",
)
@click.option(
    "--log",
    "log_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also append plain progress lines to this file.",
)
@wait_option
@farm_options
@handle_errors
def verify(
    selectors: tuple[str, ...],
    all_: bool,
    nodes: tuple[str, ...],
    trigger: str,
    no_report: bool,
    quiet: bool,
    log_file: Path | None,
    wait: float,
    config_path: Path,
    database: str | None,
) -> None:
    """Build, inspect and run kernels on nodes; store and report every cell.

    One run at a time per database (a lock beside it). Exit 0 when every cell
    is as expected, 1 when one is not, 4 when only infrastructure failed, 6
    when another run holds the lock (see README, "Exit codes").

    Examples: farm verify --all;  farm verify wgmma_gemm:gencode --node h100;
    farm verify --all --quiet --trigger cron --log /var/log/farm.log --wait 600
    """
    from orchestrator.config.output_paths import farm_file_problem, site_write_problem
    from orchestrator.plan import SelectionError, plan_cells
    from orchestrator.progress import Guarded, Listeners, LiveListener, PlainListener
    from orchestrator.report import site as report_mod
    from orchestrator.report.model import collect
    from orchestrator.run.scheduler import FarmRun
    from orchestrator.run.stopping import reap_dead_runs
    from orchestrator.store import journal
    from orchestrator.store.access import write_problem
    from orchestrator.store.database import Store
    from orchestrator.store.engine import redact_url
    from orchestrator.store.location import same_database
    from orchestrator.store.lock import run_lock

    if not all_ and not selectors:
        raise click.UsageError("name KERNEL[:VARIANT] selectors, or --all")
    with load_failure_logged(log_file, config_path):
        farm = _load(config_path, database)
    if log_file is not None and (problem := farm_file_problem(log_file, farm, "progress log")):
        raise ConfigError("--log", str(log_file), *problem)
    # from here on every failure also ends the log: its last line was the night before's
    # verdict, green over a night refused at its start (a red-team finding)
    with failure_logged(log_file), stop_before_run() as prerun:
        # before the run, not after it: its index stayed the night before's green (red-team 230)
        site_here = not no_report and same_database(farm.database_url, farm.configured_database_url)
        if site_here and (problem := site_write_problem(farm.reports_dir)):
            raise ConfigError(str(farm.file), "reports", *problem)
        journals = journal.journal_folder(farm.database_url, farm.root, farm.spec.journal)
        if problem := write_problem(farm.database_url, journals):  # before the lock: its exit 6 says "held"
            raise StoreError(problem)
        cells = plan_cells(farm, list(selectors) or None, list(nodes) or None)
        disabled = [name for name, node in farm.nodes.items() if not node.enabled]
        if not cells:  # a run of nothing would exit 0 and export a green, empty suite: it verified nothing
            if not nodes and not farm.enabled_nodes:
                raise ConfigError(
                    str(farm.file),
                    "nodes",
                    f"every node disabled (enabled: false: {', '.join(disabled)})",
                    "at least one enabled node, or the nodes to run named with --node",
                )
            raise SelectionError(f"the selection {' '.join(selectors) or '--all'} matches no cell")
        # stdout may close or fill mid-run (`| head -1`, a full disk): that stops what is printed, never the run
        out = Guarded(sys.stdout)
        say = functools.partial(click.echo, file=out)
        if disabled and not nodes and not quiet:
            say(f"disabled in {farm.file.name} (not run): {', '.join(disabled)}")
        prerun.check("while it waited for the run lock")
        with (
            run_lock(farm.database_url, farm.root, wait, farm.lock_dir, prerun.check),
            contextlib.ExitStack() as stack,
        ):
            prerun.check("once it held the run lock, before its run started")
            store = Store(farm.database_url)
            store.outage.wait = farm.spec.store_wait  # a server restart mid-run is waited out (store/outage.py)
            aborted = store.abort_unfinished_runs(journals)  # each one's closing mark (store/closing.py)
            for one in aborted:
                say(printable(one.said(), keep_newlines=False))
            # what those runs left running (a hung kernel holding a GPU) goes before this run waits on it
            used = {cell.node: farm.nodes[cell.node] for cell in cells}
            for run_id, node, count in reap_dead_runs(used, store.run_tokens([one.run_id for one in aborted])):
                say(f"run {run_id}: killed {count} process{'es' * (count != 1)} it left on {node}")
            listeners: list = []
            same_site = same_database(farm.database_url, farm.configured_database_url)
            # the commands the run's end names: the run's database where not farm.yaml's, and farm.yaml by a
            # path that holds wherever cron started the run (review 267)
            steps = NextSteps(selectors, all_, nodes, config_path.absolute(), None if same_site else farm.database_url)
            own_site = not no_report and same_site
            early = _RenderAtStart(store, farm) if own_site else None
            if early is not None:
                listeners.append(early)
            elif same_site and (farm.reports_dir / "index.html").is_file():
                # --no-report: the site is not rendered, yet its index must not stay the last rendered
                # run's green over this one (a red-team finding)
                listeners.append(_UnrenderedAtStart(farm.reports_dir))
            if quiet:
                listeners.append(PlainListener(out, quiet=True))  # each node's infra cause, once
            else:
                listeners.append(LiveListener(out) if out.isatty() else PlainListener(out))
            if log_file is not None:
                log = Guarded(open_log(log_file))  # its lines out before it closes, or given up (guarded.py)
                stack.callback(log.close)
                listeners.append(PlainListener(stream=log, verdict=True, steps=steps))
            selection = " ".join(["--all"] if all_ else selectors) + "".join(f" --node {n}" for n in nodes)
            run = FarmRun(farm, store, listener=Listeners(listeners), trigger=trigger)
            store.outage.stopped = lambda: run.stopping  # a SIGTERM ends the wait for a server gone
            stack.enter_context(stopping_on_signals(run, until_exit=True))
            prerun.check()  # a signal before the run's own handlers: nothing of the run is stored yet
            if early is not None:  # before the run is stored: killed from now on, no green of the night before stays
                starting = "is starting; its report is rendered once it is stored"
                report_mod.mark_unrendered(farm.reports_dir, None, starting)
            try:
                summary = run.execute(cells, selection.strip())
            except BaseException as err:
                if early is not None:  # the run is stored aborted: the site says so, whatever the thread had done
                    early.join()
                    _site_after_failed_start(store, farm, getattr(getattr(run, "summary", None), "run_id", 0), err)
                raise
            if quiet:
                with store.reading():
                    model = collect(store, summary.run_id, farm)
                    changes = model.listed_changes
                    # a metric with no value judges no speed: the index lists it under "what changed", and
                    # the mail said nothing, the check off unseen (a red-team finding)
                    unread = [(model.label((m.kernel, m.variant, m.node, m.device)), m) for m in model.speed]
                    unread = [(label, m) for label, m in unread if m.value is None]
                for change in changes:
                    if change.change not in ("new", "changed"):
                        say(_change_line(change, model, summary.run_id))
                for label, m in unread:
                    say(printable(f"no value: {label}: {m.name}: {m.note}", keep_newlines=False))
            else:
                say("")
                say(_matrix_text(summary))
                # a stage no cell reached (sanitize, where no variant asks for it) is left out
                stages = ", ".join(
                    f"{name} {summary.stage_seconds[name]:.1f} s" for name in STAGES if name in summary.stage_seconds
                )
                say(
                    f"\nwall {summary.wall_seconds:.1f} s; summed over cells: {stages}; "
                    f"{summary.bytes_shipped} bytes shipped"
                )
            for line in steps(summary):  # a stop's rerun (review 127), the lost nodes' (review 264)
                say(line)
            say(verdict_line(summary))
            # the run's end is committed: older finished runs' journals beyond journal_keep can go
            journal.prune(journals, store, farm.spec.journal_keep)
            if early is not None:
                early.join()
            if not no_report and not same_database(farm.database_url, farm.configured_database_url):
                # farm.yaml's reports/ is its own database's site, which reviewers read: a scratch
                # database's run would replace it (found by a red-team helper)
                url = redact_url(farm.database_url)
                aside(  # notes on stderr never wait on its reader (guarded.py)
                    f"report not rendered: the database {url} is not {farm.file.name}'s "
                    f"({redact_url(farm.configured_database_url)}), whose site is {farm.reports_dir}; "
                    f"`farm report --database {url} --run {summary.run_id} --out DIR` renders this run"
                )
            elif not no_report:
                try:
                    now = farm_now(config_path, database, database_origin())  # the jobs as the run ended
                    index = report_mod.render(store, farm.reports_dir, summary.run_id, farm=now)
                except Exception as err:  # the run is stored with its code: the process returns that one, whatever
                    aside(f"report not rendered: {_render_failure(err)}; {_stored(summary)}")
                    why = f"has no report: its render failed ({_render_failure(err)}); "
                    why += f"stored with exit {summary.exit_code}"
                    report_mod.mark_unrendered(farm.reports_dir, summary.run_id, why)
                else:
                    if not quiet:
                        say(f"report: {index}")
    sys.exit(summary.exit_code)


class _RenderAtStart(NullListener):
    """The site, rendered once as soon as the run is stored (beside the nodes' start):
    a run that then dies (SIGKILL, the OOM killer, a reboot, a render that fails at the
    end) leaves an index saying run N did not finish, never the night before's green
    with no word of it (found by a red-team helper)."""

    def __init__(self, store: Store, farm: Farm) -> None:
        self.store, self.farm = store, farm
        self.thread: threading.Thread | None = None

    def run_started(self, run_id: int, cells: list) -> None:
        # at once, before the render (a second or more on a big site): a farm killed meanwhile
        # left the night before's green index over a run it did not show (a red-team finding)
        from orchestrator.report import site as report_mod

        report_mod.mark_unrendered(
            self.farm.reports_dir, run_id, "started; its report is being rendered, or the run died first"
        )
        self.thread = threading.Thread(target=self._render, args=(run_id,), name="render-at-start", daemon=True)
        self.thread.start()

    def _render(self, run_id: int) -> None:
        from orchestrator.report import site as report_mod

        try:
            report_mod.render(self.store, self.farm.reports_dir, run_id, farm=self.farm)
        except Exception as err:  # the run goes on; its end renders again, and says so if that fails too
            aside(f"report not rendered at the run's start: {_render_failure(err)}")
            why = f"has no report yet: its render at the start failed ({_render_failure(err)})"
            report_mod.mark_unrendered(self.farm.reports_dir, run_id, why)

    def join(self) -> None:
        """Before the end's render: one renderer at a time in the reports folder."""
        if self.thread is not None:
            self.thread.join()


class _UnrenderedAtStart(NullListener):
    """`verify --no-report` on the site's own database: index.html says the run has no
    report as soon as it is stored, never the last rendered run's verdicts as current."""

    def __init__(self, reports: Path) -> None:
        self.reports = reports

    def run_started(self, run_id: int, cells: list) -> None:
        from orchestrator.report import site as report_mod

        report_mod.mark_unrendered(self.reports, run_id, "was run with --no-report: `farm report` renders it")


def _render_failure(err: Exception) -> str:
    """Why a render after the run failed (farm.yaml's `reports` was checked at load:
    what is left is a folder that cannot be written, a full disk, or a bug)."""
    if isinstance(err, FarmError | OSError):  # a page that could not be written names itself
        return printable(str(err), keep_newlines=False)
    return f"internal error ({type(err).__name__}: {printable(str(err), keep_newlines=False)}), a bug in farm"


def _stored(summary: RunSummary) -> str:
    return (
        f"run {summary.run_id} is stored with exit {summary.exit_code}, the code returned; "
        f"`farm report --run {summary.run_id}` renders it"
    )


def _site_after_failed_start(store: Store, farm: Farm, run_id: int, err: BaseException) -> None:
    """The site once `verify` failed: its run's page where the run was stored (aborted),
    else the last stored run's again, not the "is starting" page a run refused at its
    start (a read-only database) left for good (a red-team finding); where neither
    renders, the index says the run could not start."""
    from orchestrator.report import site as report_mod

    try:
        report_mod.render(store, farm.reports_dir, run_id or None, farm=farm)
    except Exception:
        # a run stored, then its database lost (a server restarted mid-run): it started, and may hold
        # cells; "could not start, nothing stored" was said of it (red-team 173's note)
        why = (
            f"did not finish ({type(err).__name__}: {err}); what it stored is not shown here: "
            f"`farm report --run {run_id}` renders it once its database answers"
            if run_id
            else f"could not start ({type(err).__name__}: {err}); nothing of it was stored"
        )
        with contextlib.suppress(Exception):
            report_mod.mark_unrendered(farm.reports_dir, run_id or None, why[:500])
