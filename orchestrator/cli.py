"""`farm`: a thin command line over the library.

Each command loads the configuration, calls one library function and prints.
A FarmError becomes one "Error: ..." line on stderr and its documented exit
code (errors.py); README.md's "Exit codes" section lists them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from orchestrator.bisect import Bisector, Ending
from orchestrator.config.farm import Farm, check_database_folder, load_farm
from orchestrator.config.header import job_yaml
from orchestrator.config.output_paths import farm_file_problem, site_folder_problem
from orchestrator.errors import EXIT_CONFIG, EXIT_INTERNAL, EXIT_OK, EXIT_SIGPIPE, ConfigError, FarmError, StoreError
from orchestrator.outcomes import STAGES
from orchestrator.plan import SelectionError, plan_cells
from orchestrator.progress import Guarded, Listeners, LiveListener, PlainListener, describe_node
from orchestrator.report import export
from orchestrator.report import site as report_mod
from orchestrator.report.model import collect
from orchestrator.report.pagewriter import write_page
from orchestrator.run.probe import probe
from orchestrator.run.scheduler import FarmRun
from orchestrator.run.summary import NullListener, RunSummary
from orchestrator.store import journal
from orchestrator.store.database import Store
from orchestrator.store.engine import redact_url
from orchestrator.store.location import same_database
from orchestrator.store.lock import run_lock
from orchestrator.terminal import printable
from orchestrator.transport import transport_for

EXIT_MEANING = {
    0: "every cell as expected",
    1: "at least one cell not as expected (a kernel or job problem)",
    3: "configuration error",
    4: "every verdict as expected, but some cells could not run (infra)",
    5: "results database error",
    6: "another farm run holds the lock",
    70: "internal error: a bug in farm, not a verdict",
}


def farm_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--config and --database, identical on every command."""

    @click.option(
        "--config",
        "config_path",
        envvar="FARM_CONFIG",
        default="farm.yaml",
        show_default=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="The farm's configuration (env FARM_CONFIG).",
    )
    @click.option(
        "--database",
        envvar="FARM_DATABASE",
        default=None,
        help="Database URL, overriding farm.yaml's (env FARM_DATABASE).",
    )
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def _fail(err: FarmError) -> None:
    click.echo(f"Error: {printable(str(err))}", err=True)
    sys.exit(err.exit_code)


def _load(config_path: Path, database: str | None, *, read_only: bool = False) -> Farm:
    # show and report only read the database: they need no CUTLASS installed, and a
    # database that is not there is theirs to report ("no results database at")
    farm = load_farm(config_path, database=database, check_dependencies=not read_only)
    if not read_only:
        check_database_folder(farm.database_url, "--database" if database else str(farm.file))
    return farm


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Every failure becomes one "Error: ..." line and its documented exit code;
    an exception nobody expected is the farm's own bug (70), never exit 1,
    which says a kernel failed."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FarmError as err:
            _fail(err)
        except SelectionError as err:
            click.echo(f"Error: {printable(str(err))}", err=True)
            sys.exit(EXIT_CONFIG)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # the reader stopped reading (`farm show 1 | head`): no error of ours
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more at exit
            sys.exit(EXIT_SIGPIPE)
        except Exception as err:  # the last line of defence
            click.echo(
                f"Error: internal error ({type(err).__name__}: {printable(str(err), keep_newlines=False)}); "
                "this is a bug in farm, not a verdict",
                err=True,
            )
            sys.exit(EXIT_INTERNAL)

    return wrapper


@click.group()
@click.version_option(package_name="farm")
def main() -> None:
    """A multi-architecture GPU test farm: build, inspect and run every kernel
    variant on every node, classify each cell, store it, render the matrix.

    Example: farm verify --all
    """


def _finite(value: float) -> float:
    if value != value:  # NaN passes every range check
        raise click.BadParameter("nan is not a number of seconds")
    return value


# verify and bisect both take the run lock: one option, spelled once
wait_option = click.option(
    "--wait",
    type=click.FloatRange(0, 86400),
    callback=lambda _ctx, _param, value: _finite(value),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="If another run holds the lock, wait this long before giving up (exit 6).",
)


def _check_trigger(value: str) -> str:
    if not 1 <= len(value) <= 32:
        raise click.BadParameter(f"{printable(value, keep_newlines=False)!r} is {len(value)} characters; give 1 to 32")
    if printable(value, keep_newlines=False) != value:
        raise click.BadParameter(f"{printable(value, keep_newlines=False)!r} holds control characters")
    return value


def verdict_line(summary: RunSummary) -> str:
    return (
        f"run {summary.run_id}: {summary.as_expected} as expected, {summary.unexpected} not, "
        f"{summary.infra} infra; exit {summary.exit_code} ({EXIT_MEANING[summary.exit_code]})"
    )


def _matrix_text(summary: RunSummary) -> str:
    columns = sorted({(cell.node, cell.device, cell.several) for cell, _, _ in summary.results})
    rows = sorted({(cell.kernel, cell.variant) for cell, _, _ in summary.results})
    by_key = {(c.kernel, c.variant, c.node, c.device): r for c, r, _ in summary.results}
    # a node's card names come from the node: shown as text, never as the terminal's commands
    rows = [(printable(k, keep_newlines=False), printable(v, keep_newlines=False), (k, v)) for k, v in rows]
    first = max([len(f"{k}:{v}") for k, v, _ in rows] + [14])
    names = {(n, d): printable(f"{n}[{d}]" if several else n, keep_newlines=False) for n, d, several in columns}
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
    if not all_ and not selectors:
        raise click.UsageError("name KERNEL[:VARIANT] selectors, or --all")
    farm = _load(config_path, database)
    if log_file is not None and (problem := farm_file_problem(log_file, farm, "progress log")):
        raise ConfigError("--log", str(log_file), *problem)
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
    with run_lock(farm.database_url, farm.root, wait), contextlib.ExitStack() as stack:
        store = Store(farm.database_url)
        for run_id, not_run in store.abort_unfinished_runs():
            say(
                f"run {run_id} was interrupted (the farm was stopped): marked aborted, "
                f"{not_run} unfinished cells recorded as not-run"
            )
        listeners: list = []
        own_site = not no_report and same_database(farm.database_url, farm.configured_database_url)
        early = _RenderAtStart(store, farm) if own_site else None
        if early is not None:
            listeners.append(early)
        if quiet:
            listeners.append(PlainListener(out, quiet=True))  # each node's infra cause, once
        else:
            listeners.append(LiveListener(out) if out.isatty() else PlainListener(out))
        if log_file is not None:
            stream = stack.enter_context(_open_log(log_file))
            listeners.append(PlainListener(stream=stream, verdict=True))
        selection = " ".join(["--all"] if all_ else selectors) + "".join(f" --node {n}" for n in nodes)
        run = FarmRun(farm, store, listener=Listeners(listeners), trigger=trigger)
        stack.enter_context(_stopping_on_signals(run))
        if early is not None:  # before the run is stored: killed from now on, no green of the night before stays
            report_mod.mark_unrendered(farm.reports_dir, None, "is starting; its report is rendered once it is stored")
        try:
            summary = run.execute(cells, selection.strip())
        except BaseException as err:
            if early is not None:  # the run is stored aborted: the site says so, whatever the thread had done
                early.join()
                _site_after_failed_start(store, farm, getattr(getattr(run, "summary", None), "run_id", 0), err)
            raise
        if quiet:
            with store.reading():
                changes = collect(store, summary.run_id, farm).listed_changes
            for change in changes:
                if change.change not in ("new", "changed"):
                    was = f"{change.previous} (run {change.previous_run}) -> " if change.previous else ""
                    say(f"{change.change}: {change.label}: {was}{change.outcome}")
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
        if summary.stopped:
            say(f"run {summary.run_id} was stopped by {summary.stopped}: its unfinished cells are not-run")
        say(verdict_line(summary))
        # the run's end is committed: older finished runs' journals beyond journal_keep can go
        journals = journal.journal_folder(farm.database_url, farm.root, farm.spec.journal)
        journal.prune(journals, store, farm.spec.journal_keep)
        if early is not None:
            early.join()
        if not no_report and not same_database(farm.database_url, farm.configured_database_url):
            # farm.yaml's reports/ is its own database's site, which reviewers read: a scratch
            # database's run would replace it (found by a red-team helper)
            url = redact_url(farm.database_url)
            click.echo(
                f"report not rendered: the database {url} is not {farm.file.name}'s "
                f"({redact_url(farm.configured_database_url)}), whose site is {farm.reports_dir}; "
                f"`farm report --database {url} --run {summary.run_id} --out DIR` renders this run",
                err=True,
            )
        elif not no_report:
            try:
                index = report_mod.render(store, farm.reports_dir, summary.run_id, farm=farm)
            except Exception as err:  # the run is stored with its code: the process returns that one, whatever this is
                click.echo(f"report not rendered: {_render_failure(err)}; {_stored(summary)}", err=True)
                why = f"has no report: its render failed ({_render_failure(err)}); stored with exit {summary.exit_code}"
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
        report_mod.mark_unrendered(
            self.farm.reports_dir, run_id, "started; its report is being rendered, or the run died first"
        )
        self.thread = threading.Thread(target=self._render, args=(run_id,), name="render-at-start", daemon=True)
        self.thread.start()

    def _render(self, run_id: int) -> None:
        try:
            report_mod.render(self.store, self.farm.reports_dir, run_id, farm=self.farm)
        except Exception as err:  # the run goes on; its end renders again, and says so if that fails too
            click.echo(f"report not rendered at the run's start: {_render_failure(err)}", err=True)
            why = f"has no report yet: its render at the start failed ({_render_failure(err)})"
            report_mod.mark_unrendered(self.farm.reports_dir, run_id, why)

    def join(self) -> None:
        """Before the end's render: one renderer at a time in the reports folder."""
        if self.thread is not None:
            self.thread.join()


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
    try:
        report_mod.render(store, farm.reports_dir, run_id or None, farm=farm)
    except Exception:
        why = f"could not start ({type(err).__name__}: {err}); nothing of it was stored"
        with contextlib.suppress(Exception):
            report_mod.mark_unrendered(farm.reports_dir, run_id or None, why[:500])


def _open_log(path: Path):
    """The --log file, its folder made if missing (the README's cron line names /var/log/farm)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a", encoding="utf-8")  # closed by the caller's ExitStack
    except OSError as err:
        raise ConfigError(
            "--log", str(path), f"a file that cannot be written ({err.strerror or err})", "a writable file"
        ) from err


@contextlib.contextmanager
def _stopping_on_signals(run: FarmRun):
    """SIGTERM (systemctl stop, a killed cron job) and a first Ctrl-C stop the run
    cleanly: no new cells, the running ones killed on every node, the unfinished
    ones recorded not-run, the run stored aborted with the exit code the process
    returns. A second Ctrl-C exits at once (the next run marks this one aborted)."""

    def handle(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if run.stopping is not None:
            if signum == signal.SIGINT:
                os._exit(130)
            return
        click.echo(f"{name}: stopping run: no new cells; killing the running ones on every node", err=True)
        threading.Thread(target=run.stop, args=(name,), name="stop", daemon=True).start()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@main.command()
@farm_options
@handle_errors
def nodes(config_path: Path, database: str | None) -> None:
    """Probe every node and print what it really is (GPU, CC, driver, nvcc).

    Example: farm nodes --config farms/hopper.yaml
    """
    farm = _load(config_path, database)
    header = f"{'node':<12} {'enabled':<7} {'GPU':<28} {'CC':<5} {'driver':<14} {'nvcc':<10} {'real':<5} notes"
    click.echo(header)
    worst = EXIT_OK
    for name, node in farm.nodes.items():
        if not node.enabled:
            click.echo(f"{name:<12} {'no':<7} {'(declared) ' + (node.gpu or '-'):<28} {node.cc or '-':<5}")
            continue
        try:
            with transport_for(name, node) as transport:
                snap = probe(transport)
        except FarmError as err:
            click.echo(f"{name:<12} {'yes':<7} unreachable: {printable(str(err), keep_newlines=False)}")
            worst = 4
            continue
        notes = describe_node(name, snap, None) if snap.cc_mismatch else ""
        if node.pypi_toolchain and snap.nvcc_version is None:  # not probed: the run ships it first
            snap = dataclasses.replace(snap, nvcc_version=f"{node.pypi_toolchain} (PyPI, shipped by verify)")
        if not snap.gpus:
            click.echo(
                f"{name:<12} {'yes':<7} {'no GPU':<28} {'-':<5} {'-':<14} {snap.nvcc_version or 'none':<10} "
                f"{'no':<5} {notes.strip()}"
            )
        for gpu in snap.gpus:
            why = "" if gpu.verified else f" {printable(gpu.check, keep_newlines=False)}: certifies nothing"
            label = printable(f"{gpu.index}: {gpu.name}" if len(snap.gpus) > 1 else gpu.name, keep_newlines=False)
            click.echo(
                f"{name:<12} {'yes':<7} {label:<28} {gpu.cc!s:<5} "
                f"{snap.driver or '-':<14} {snap.nvcc_version or 'none':<10} {'yes' if gpu.verified else 'no':<5} "
                f"{(notes + why).strip()}"
            )
    sys.exit(worst)


@main.command()
@click.argument("kernels", nargs=-1, metavar="[KERNEL]...")
@farm_options
@handle_errors
def jobs(kernels: tuple[str, ...], config_path: Path, database: str | None) -> None:
    """Print each kernel's job as the farm reads it, as YAML, with where each
    field came from: its job file, its source's header, or a default.
    Reads the configuration only (no database, no node).

    Examples: farm jobs;  farm jobs cutlass_gemm wgmma_gemm
    """
    farm = _load(config_path, database)
    unknown = [k for k in kernels if k not in farm.jobs]
    if unknown:
        raise SelectionError(f"no job for kernel {', '.join(map(repr, unknown))}; kernels: {', '.join(farm.jobs)}")
    documents = [job_yaml(k, farm.jobs[k].spec, farm.jobs[k].provenance) for k in kernels or farm.jobs]
    click.echo(printable("---\n".join(documents)), nl=False)


@main.command()
@click.option("--run", "run_id", type=int, default=None, help="A stored run (default: the latest).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="html: the site's folder (default: farm.yaml's `reports`); junit, json: a file (default: stdout).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["html", "junit", "json"]),
    default="html",
    show_default=True,
    help="html: the site in reports/; junit, json: to stdout, or to the --out file.",
)
@farm_options
@handle_errors
def report(run_id: int | None, out: Path | None, fmt: str, config_path: Path, database: str | None) -> None:
    """Render the reviewers' site, or export a run as JUnit XML or JSON,
    from the database alone.

    Examples: farm report;  farm report --format junit --out junit.xml
    """
    if out is not None and fmt != "html" and (kind := _no_regular_file(out)):
        # the export replaces --out by a rename: a device, a FIFO or a link would be replaced, not written
        raise click.BadParameter(
            f"{out} is {kind}; expected a regular file (junit and json are one file)", param_hint="'--out'"
        )
    if out is not None and fmt == "html" and out.exists() and not out.is_dir():
        raise click.BadParameter(f"{out} is a file; expected a folder (the site is many pages)", param_hint="'--out'")
    farm = _load(config_path, database, read_only=True)
    if fmt == "html" and out is not None and (problem := site_folder_problem(out, farm.source_folders)):
        raise ConfigError("--out", str(out), *problem)
    if fmt != "html" and out is not None and (problem := farm_file_problem(out, farm, f"{fmt} export")):
        raise ConfigError("--out", str(out), *problem)
    store = Store(farm.database_url, create=False)
    the_site = out is None or out.resolve() == farm.reports_dir.resolve()
    if fmt == "html" and the_site and run_id is not None:
        latest = store.latest_run()
        if latest is not None and run_id != latest.id and store.run(run_id) is not None:
            # the reviewers' site is the latest run's: rendered as of an older run it went back in
            # time, a red night's verdicts gone from it (a red-team finding)
            raise click.BadParameter(
                f"run {run_id} is not the latest run ({latest.id}): the site in {farm.reports_dir} stays the latest "
                f"run's; render run {run_id} elsewhere with --out DIR",
                param_hint="'--run'",
            )
    if fmt == "html":
        target = out or farm.reports_dir
        try:
            index = report_mod.render(store, target, run_id, farm=farm)
        except (OSError, report_mod.PageWriteError) as err:
            cause = err.oserror if isinstance(err, report_mod.PageWriteError) else err
            found = f"a folder that cannot be written ({cause.strerror or cause})"
            if out is None:  # farm.yaml's folder, not one the command line named
                raise ConfigError(str(farm.file), "reports", f"{target}, {found}", "a writable folder") from err
            raise ConfigError("--out", str(target), found, "a writable folder") from err
        click.echo(str(index))
        return
    with store.reading():
        model = collect(store, run_id, farm)
    text = export.junit(model) if fmt == "junit" else export.as_json(model)
    if out is None:
        click.echo(text, nl=False)
    else:
        try:  # whole or not at all: a CI step reading it never finds half an export
            write_page(str(out), text.encode(), compare=False)
        except OSError as err:
            raise ConfigError(
                "--out", str(out), f"a file that cannot be written ({err.strerror or err})", "a writable file"
            ) from err
        click.echo(str(out))
    # the exported run's own code: a CI step that only exports is never green on a red run
    sys.exit(export.exit_code(model.run, model.unfinished))


def _no_regular_file(path: Path) -> str | None:
    """What `path` is when it is there and is no regular file, by lstat: a link is a
    link, whatever it points at."""
    try:
        mode = path.lstat().st_mode
    except OSError:  # not there (the export makes it), or its folder cannot be reached (the write says so)
        return None
    for is_kind, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if is_kind(mode):
            return kind
    return None if stat.S_ISREG(mode) else "no regular file"


@main.command("import")
@click.argument(
    "journal_files",
    metavar="JOURNAL...",
    nargs=-1,
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
)
@farm_options
@handle_errors
def import_(journal_files: tuple[Path, ...], config_path: Path, database: str | None) -> None:
    """Rebuild runs in the database from their journals (every run writes one
    beside the database: results.db.journal/TOKEN.jsonl), after results.db was
    lost, replaced or could not be written. Several journals are imported in the
    order their runs started (the newest run must be the last); a run already
    there, or one older than the newest run there, is refused.

    Example: farm import results.db.journal/5f0c2a9e1b7d.jsonl results.db.journal/0a4f3c9d2e61.jsonl
    """
    farm = _load(config_path, database, read_only=True)
    store = Store(farm.database_url)
    # a journal whose start cannot be read sorts first: its import then names what is wrong with it
    oldest = datetime.min.replace(tzinfo=UTC)
    starts = {path: journal.started_at(path) or oldest for path in journal_files}
    for path in sorted(journal_files, key=lambda p: (starts[p], str(p))):
        run_id, status, results = store.import_journal(path)
        click.echo(f"imported {path} as run {run_id} ({status}, {results} results)")


@main.command()
@click.argument("result_id", type=int)
@farm_options
@handle_errors
def show(result_id: int, config_path: Path, database: str | None) -> None:
    """Print one stored cell result: verdict, provenance, output and logs.

    Example: farm show 12
    """
    farm = _load(config_path, database, read_only=True)
    store = Store(farm.database_url, create=False)
    r = store.result(result_id) if 1 <= result_id < 2**63 else None
    if r is None:
        raise StoreError(f"no result {result_id} in {redact_url(farm.database_url)}")
    text = lambda data: (data or b"").decode("utf-8", "replace").rstrip()  # noqa: E731
    say = lambda line: click.echo(printable(line))  # noqa: E731 - everything shown is stored input
    card = f" ({r.device}, CC {r.cc}" + (f", GPU {r.gpu_index} {r.gpu_uuid}" if r.gpu_uuid else "") + ")"
    say(f"result {r.id} (run {r.run_id}): {r.kernel}:{r.variant} on {r.node}" + (card if r.device else ""))
    say(f"outcome   {r.outcome}" + (f" at {r.failed_stage}" if r.failed_stage else "") + f": {r.reason}")
    say(f"expected  {r.expected}: {r.expected_reason}")
    # what the cell page and the exports flag, said here too (a red-team finding: `farm show`
    # printed a pass on a stand-in card, or from a killed run, with no word of either)
    run = store.run(r.run_id)
    status = run.status if run is not None else "unknown"
    ended = {"finished": "finished", "aborted": "did not finish (aborted)", "running": "had not finished (running)"}
    said = ended.get(status, status) + ("" if status == "finished" else ": nothing of it certifies")
    say(
        f"run       {r.run_id} {said}"
        + (f" (a bisection's run, {run.trigger})" if run and run.trigger == "bisect" else "")
    )
    if r.device and not r.real_gpu:
        say(
            "card      not confirmed by the NVIDIA driver (a stand-in nvidia-smi, or one that misreports it): "
            "certifies nothing"
        )
    say(f"contract  {r.contract}")
    say(f"identity  {r.identity or '- (not every input identified: certifies nothing)'}")
    for path, sha in r.sources.items():
        say(f"source    {path} sha256 {sha}")
    for dep, d in (r.dependencies or {}).items():
        say(f"dep       {dep} {d.get('version') or ''} digest {d.get('digest')}")
    say(
        f"binary    sha256 {r.binary_sha256 or '-'}; cubins {r.elf_targets}; ptx {r.ptx_targets}; "
        f"code path {r.code_path or '-'}"
    )
    say(f"build     {r.build_command}" + (" (reused)" if r.build_cached else ""))
    say(f"instrs    found {r.instruction_counts}, required {r.required_instructions}")
    say(f"stages    {r.stage_seconds}")
    for one in r.sanitizer or []:
        found = "timed out" if one.get("timed_out") else f"{one.get('errors')} errors"
        say(f"sanitize  {one.get('tool')}: {found}, exit {one.get('exit_code')}")
        for line in str(one.get("findings") or "").splitlines()[:10]:
            say(f"          {line}")
    say(f"exit code {r.exit_code}")
    for name, data, size, sha in (
        ("stdout", r.stdout, r.stdout_size, r.stdout_sha256),
        ("stderr", r.stderr, r.stderr_size, r.stderr_sha256),
    ):
        cut = (r.output_cuts or {}).get(name)
        kept = f"; bytes {cut[0]} to {cut[1]} left out" if cut else ""
        say(f"--- {name} ({size} bytes, sha256 {sha or '-'}{kept})\n{text(data)}")
    say(f"--- build log\n{text(r.build_log)}")


@main.command("bisect")
@click.argument("selector", metavar="KERNEL[:VARIANT]")
@click.option("--node", required=True, metavar="NAME", help="The node the cell runs on (farm.yaml as it is now).")
@click.option("--good", required=True, metavar="REV", help="A commit where the cell was as expected.")
@click.option("--bad", required=True, metavar="REV", help="A later commit where it is not.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the report is rendered (default: farm.yaml's `reports`).",
)
@wait_option
@farm_options
@handle_errors
def bisect_(
    selector: str,
    node: str,
    good: str,
    bad: str,
    out: Path | None,
    wait: float,
    config_path: Path,
    database: str | None,
) -> None:
    """Find the first commit at which a cell stops being as expected.

    Runs the cell at the commits between --good and --bad that touched the
    kernel's job file, sources or headers (each an ordinary stored run, trigger
    "bisect"; a build of the same inputs is reused), and prints the first bad
    commit, its parent's verdict and the cell's page. Exit 0 when it is found,
    1 when the revisions do not bracket a regression, 3 for a bad selection or
    revision, 4 when the node failed (no verdict is guessed).

    Example: farm bisect cutlass_gemm:sm80 --node t4 --good v1.0 --bad HEAD
    """
    farm = _load(config_path, database)
    if out is not None and (problem := site_folder_problem(out, farm.source_folders)):
        raise ConfigError("--out", str(out), *problem)
    bisector = Bisector(farm, selector, node, good, bad, wait=wait, say=lambda line: click.echo(printable(line)))
    with _stopping_on_signals(bisector):  # type: ignore[arg-type] - it stops like a run
        found = bisector.run()
    click.echo("")
    first, parent = found.first_bad, found.last_good
    if found.ending is Ending.FOUND and first is not None and parent is not None and found.parent is not None:
        commit = first.commit
        click.echo(printable(f"first bad commit: {commit.sha} ({commit.date}) {commit.subject}", keep_newlines=False))
        click.echo(printable(f"  there:      {first.reason} (run {first.run_id}, result {first.result_id})"))
        same = "" if parent.commit == found.parent else f", the same inputs as {parent.commit.short}"
        said = f"  its parent: {found.parent.short} {parent.reason} (result {parent.result_id}{same})"
        click.echo(printable(said))
    else:
        click.echo(printable(found.message))
    shown = found.shown
    if shown is not None and shown.run_id is not None:
        target = out or farm.reports_dir
        try:
            report_mod.render(Store(farm.database_url), target, shown.run_id, farm=farm)
        except (OSError, report_mod.PageWriteError) as err:
            cause = err.oserror if isinstance(err, report_mod.PageWriteError) else err
            found_text = f"a folder that cannot be written ({cause.strerror or cause})"
            raise ConfigError("--out", str(target), found_text, "a writable folder") from err
        click.echo(f"page: {target / 'cells' / f'{shown.result_id}.html'}")
    skipped = sum(1 for t in found.tested if t.run_id is None)
    click.echo(
        f"runs: {len(found.runs)} ({found.builds_reused} with a build reused: no compiler run); untestable: {skipped}; "
        f"commits after --good: {found.commits_in_range}, of which {found.candidates} touched the kernel's inputs"
    )
    meaning = {0: "first bad commit found", 1: "no first bad commit", 4: "stopped: no verdict guessed"}
    click.echo(f"bisect: exit {found.exit_code} ({meaning.get(found.exit_code, EXIT_MEANING.get(found.exit_code))})")
    sys.exit(found.exit_code)


if __name__ == "__main__":
    main()
