"""`farm bisect`: the commit where a cell stopped being as expected."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.errors import ConfigError, FarmError
from orchestrator.terminal import printable

if TYPE_CHECKING:  # the pipeline's modules are imported by the commands that use them: `farm --help` needs none
    pass

from orchestrator.cli.base import EXIT_MEANING, _load, farm_options, handle_errors, main, wait_option
from orchestrator.cli.run_signals import stopping_on_signals


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
    from orchestrator.bisect import Bisection, Bisector, Ending
    from orchestrator.config.output_paths import site_folder_problem, site_write_problem
    from orchestrator.report import site as report_mod
    from orchestrator.store.database import Store
    from orchestrator.store.engine import redact_url
    from orchestrator.store.journal import journal_folder
    from orchestrator.store.location import same_database

    farm = _load(config_path, database)
    journal = journal_folder(farm.database_url, farm.root, farm.spec.journal)
    if out is not None and (problem := site_folder_problem(out, farm.source_folders, journal)):
        raise ConfigError("--out", str(out), *problem)
    bisector = Bisector(farm, selector, node, good, bad, wait=wait, say=lambda line: click.echo(printable(line)))
    target = out or farm.reports_dir
    unwritten: list[FarmError] = []  # raised once the walk's verdict is printed, as before the render moved
    # farm.yaml's reports/ is its own database's site: a walk on another (--database, FARM_DATABASE)
    # rendered its site there, over the farm's own (a red-team finding); `verify` leaves it alone too
    elsewhere = target.resolve() == farm.reports_dir.resolve() and not same_database(
        farm.database_url, farm.configured_database_url
    )
    # the site's folder named as the user gave it: an unwritable farm.yaml `reports` was called `--out`
    named = ("--out", str(out)) if out is not None else (str(farm.file), "reports")
    # before the walk, as `verify` before its run (red-team 230): found only after every commit's run (review 236)
    if not elsewhere and (problem := site_write_problem(target, "another folder with `--out DIR`")):
        raise ConfigError(*named, *problem)

    def render(found: Bisection) -> None:
        """The shown run's site, rendered under the walk's run lock (see Bisector.run); a
        folder that cannot be written is said after the verdict is printed."""
        shown = found.shown
        if shown is None or shown.run_id is None or elsewhere:
            return
        store = Store(farm.database_url)
        try:
            fleet = store.latest_run(bisections=False)
            if fleet is not None and shown.result_id is not None and target.resolve() == farm.reports_dir.resolve():
                # the reviewers' site stays the fleet's latest run, with the shown cell's page beside it:
                # rendered as the bisection's run, its old commit's green stood there as current (a red-team finding)
                report_mod.render(store, target, fleet.id, farm=farm, also={shown.result_id: shown.run_id})
            else:  # a folder of its own (--out), or a farm with no run but bisections'
                report_mod.render(store, target, shown.run_id, farm=farm)
        except (OSError, report_mod.PageWriteError) as err:
            cause = err.oserror if isinstance(err, report_mod.PageWriteError) else err
            found_text = f"a folder that cannot be written ({cause.strerror or cause})"
            unwritten.append(ConfigError(*named, found_text, "a writable folder"))
            unwritten[-1].__cause__ = err
        except FarmError as err:  # the database failing under the render
            unwritten.append(err)
        finally:
            store.close()

    with stopping_on_signals(bisector):  # it stops like a run (run_signals.Stoppable)
        found = bisector.run(then=render)
    click.echo("")
    first, parent = found.first_bad, found.last_good
    if found.ending is Ending.FOUND and first is not None and parent is not None and found.parent is not None:
        commit = first.commit
        click.echo(printable(f"first bad commit: {commit.sha} ({commit.date}) {commit.subject}", keep_newlines=False))
        # a reason may quote what a node or a kernel printed: one line, never a line of its own after it
        there = f"  there:      {first.reason} (run {first.run_id}, result {first.result_id})"
        click.echo(printable(there, keep_newlines=False))
        same = "" if parent.commit == found.parent else f", the same inputs as {parent.commit.short}"
        said = f"  its parent: {found.parent.short} {parent.reason} (result {parent.result_id}{same})"
        click.echo(printable(said, keep_newlines=False))
    else:
        click.echo(printable(found.message))
    shown = found.shown
    if shown is not None and shown.run_id is not None:
        if unwritten:
            raise unwritten[0]
        if elsewhere:
            url = redact_url(farm.database_url)
            click.echo(
                f"report not rendered: the database {url} is not {farm.file.name}'s "
                f"({redact_url(farm.configured_database_url)}), whose site is {farm.reports_dir}; "
                f"`farm report --database {url} --run {shown.run_id} --out DIR` renders this run",
                err=True,
            )
        else:
            click.echo(f"page: {target / 'cells' / f'{shown.result_id}.html'}")
    skipped = sum(1 for t in found.tested if t.run_id is None)
    click.echo(
        f"runs: {len(found.runs)} ({found.builds_reused} with a build reused: no compiler run); untestable: {skipped}; "
        f"commits after --good: {found.commits_in_range}, of which {found.candidates} touched the kernel's inputs"
    )
    meaning = {0: "first bad commit found", 1: "no first bad commit", 4: "stopped: no verdict guessed"}
    click.echo(f"bisect: exit {found.exit_code} ({meaning.get(found.exit_code, EXIT_MEANING.get(found.exit_code))})")
    sys.exit(found.exit_code)
