"""`farm report`, `farm show` and `farm import`: what the store holds, rendered, shown or brought in."""

from __future__ import annotations

import stat
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from orchestrator.errors import CommandStopped, ConfigError, FarmError, StoreError
from orchestrator.farm_writable import WHY
from orchestrator.terminal import printable

if TYPE_CHECKING:  # the pipeline's modules are imported by the commands that use them: `farm --help` needs none
    from orchestrator.config.farm import Farm
    from orchestrator.store.database import Store

from orchestrator.cli.base import _load, database_origin, echo, farm_options, handle_errors, main, wait_option


@main.command()
@click.option("--run", "run_id", type=int, default=None, help="A stored run (default: the latest; no bisection's).")
@click.option(
    "--out",
    "given_out",
    type=click.Path(),  # as typed: a Path drops the trailing slash that says a folder is meant
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
def report(run_id: int | None, given_out: str | None, fmt: str, config_path: Path, database: str | None) -> None:
    """Render the reviewers' site, or export a run as JUnit XML or JSON,
    from the database alone.

    Examples: farm report;  farm report --format junit --out junit.xml
    """
    from orchestrator.cli.run_signals import Stopped, raising_on_signals

    try:
        with raising_on_signals():
            _report(run_id, given_out, fmt, config_path, database)
    except Stopped as stop:
        # one line and a shell's code for the signal: "Aborted!" and exit 1 read as a kernel's failure
        if fmt == "html":
            left = "each page it wrote is whole, the rest are as they were: `farm report` renders them"
        elif given_out is None:
            left = "the export on stdout is cut short"
        else:
            left = f"{given_out} was not written (no part of the export is there)"
        raise CommandStopped(f"farm report was stopped by {stop.name}: {left}", stop.signum) from None


def _report(run_id: int | None, given_out: str | None, fmt: str, config_path: Path, database: str | None) -> None:
    from orchestrator.config.output_paths import farm_file_problem, site_folder_problem
    from orchestrator.report import export
    from orchestrator.report import site as report_mod
    from orchestrator.report.model import collect
    from orchestrator.report.pagewriter import write_page
    from orchestrator.store.database import Store
    from orchestrator.store.engine import redact_url
    from orchestrator.store.journal import journal_folder
    from orchestrator.store.location import same_database

    out = Path(given_out) if given_out is not None else None
    if given_out is not None and fmt != "html" and given_out.endswith("/"):
        # `--out ci/x.xml/` meant a folder: the export wrote a file x.xml there, or replaced one (round 143)
        raise click.BadParameter(
            f"{given_out} ends in a slash, a folder's name; expected a regular file (junit and json are one file)",
            param_hint="'--out'",
        )
    if out is not None and fmt != "html" and (kind := _no_regular_file(out)):
        # the export replaces --out by a rename: a device, a FIFO or a link would be replaced, not written
        raise click.BadParameter(
            f"{out} is {kind}; expected a regular file (junit and json are one file)", param_hint="'--out'"
        )
    if out is not None and fmt == "html" and out.exists() and not out.is_dir():
        raise click.BadParameter(f"{out} is a file; expected a folder (the site is many pages)", param_hint="'--out'")
    farm = _load(config_path, database, read_only=True)
    journal = journal_folder(farm.database_url, farm.root, farm.spec.journal)
    if fmt == "html" and out is not None and (problem := site_folder_problem(out, farm.source_folders, journal)):
        raise ConfigError("--out", str(out), *problem)
    if fmt != "html" and out is not None and (problem := farm_file_problem(out, farm, f"{fmt} export")):
        raise ConfigError("--out", str(out), *problem)
    store = Store(farm.database_url, create=False)  # first: a URL that cannot be read says so (exit 5)
    the_site = out is None or out.resolve() == farm.reports_dir.resolve()
    if fmt == "html" and the_site and not same_database(farm.database_url, farm.configured_database_url):
        # farm.yaml's reports/ is its own database's site: `verify --database` leaves it alone, and a
        # scratch database's green run rendered there stood over the farm's red night (a red-team finding)
        url = redact_url(farm.database_url)
        raise click.BadParameter(
            f"{url} is not {farm.file.name}'s database ({redact_url(farm.configured_database_url)}), whose site is "
            f"{farm.reports_dir}; render it elsewhere with --out DIR",
            param_hint=f"'{database_origin()}'",
        )
    if fmt == "html" and the_site and run_id is not None:
        latest = store.latest_run(bisections=False)
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
        latest = store.latest_run(bisections=False)
        shown = run_id if run_id is not None else latest.id if latest is not None else None
        try:
            index = report_mod.render(store, target, run_id, farm=farm)
            # a run stored while this one rendered (a nightly `verify`'s start): the site is the latest
            # run's, never the one read before it over the newer one (a red-team finding)
            for _ in range(3):
                latest = store.latest_run(bisections=False)
                if not (the_site or run_id is None) or latest is None or shown is None or latest.id <= shown:
                    break
                shown = latest.id
                index = report_mod.render(store, target, shown, farm=farm)
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
        echo(text, nl=False)
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
@click.option(
    "--in-given-order",
    "given_order",
    is_flag=True,
    help="The journals' runs came after the database's newest run, in the order given, whatever their "
    "starts say (a farm host whose clock was ahead for that run).",
)
@wait_option
@farm_options
@handle_errors
def import_(
    journal_files: tuple[Path, ...], given_order: bool, wait: float, config_path: Path, database: str | None
) -> None:
    """Rebuild runs in the database from their journals (every run writes one
    beside the database: results.db.journal/TOKEN.jsonl), after results.db was
    lost, replaced or could not be written. Several journals are imported in the
    order their runs started (the newest run must be the last), or with
    --in-given-order as given; a run already there, or one older than the newest
    run there (the highest id), is refused.

    Example: farm import results.db.journal/5f0c2a9e1b7d.jsonl results.db.journal/0a4f3c9d2e61.jsonl
    """
    from orchestrator.store import journal
    from orchestrator.store.database import Store
    from orchestrator.store.journal_check import read_journal
    from orchestrator.store.location import same_database
    from orchestrator.store.lock import run_lock

    farm = _load(config_path, database, read_only=True)
    seen: dict[object, Path] = {}
    for path in journal_files:  # every one read before any is stored, or the database touched (its schema)
        run = read_journal(path)[0][1]
        # one run named twice (the same file, another spelling or link of it, a copy): the first was
        # stored and the second refused, half the command done (a red-team finding); refused whole
        file = path.stat()
        run_key = ("run", run.get("token") or str(run.get("started_at")))  # an older farm's run: its start
        for same, key in (("the same file as", (file.st_dev, file.st_ino)), ("the same run's journal as", run_key)):
            if key in seen:
                raise click.BadParameter(
                    f"{path} is {same} {seen[key]}: one journal named twice; expected each run's journal once",
                    param_hint="'JOURNAL...'",
                )
            seen[key] = path
    # one writer at a time: beside a live `farm verify` an import landed as the newest run over it
    with run_lock(farm.database_url, farm.root, wait, farm.lock_dir):
        store = Store(farm.database_url)
        # a journal whose start cannot be read sorts first: its import then names what is wrong with it
        oldest = datetime.min.replace(tzinfo=UTC)
        starts = {path: journal.started_at(path) or oldest for path in journal_files}
        imported = []
        try:
            # a clock that stepped makes starts disagree with the runs' order: the operator's order then
            ordered = journal_files if given_order else sorted(journal_files, key=lambda p: (starts[p], str(p)))
            for path in ordered:
                run_id, status, results, note = store.import_journal(path, given_order)
                imported.append(run_id)
                click.echo(f"imported {path} as run {run_id} ({status}, {results} results{note})")
        finally:  # also where a later journal is refused (its run already there): those before it are stored
            if imported and same_database(farm.database_url, farm.configured_database_url):
                _mark_imported(store, farm.reports_dir, imported)


def _mark_imported(store: Store, reports: Path, imported: list[int]) -> None:
    """reports/index.html says the newest run has no report where an imported run is the fleet's
    newest: the site's database has a newer run than its index shows, and the run before's green
    stood there as current, as after `verify --no-report` (a red-team finding)."""
    from orchestrator.report import site as report_mod

    try:
        latest = store.latest_run(bisections=False)
        newest = latest.id if latest is not None else None
    except FarmError:  # the database failed after storing them (what is raised says so): the last one stored
        newest = imported[-1]
    if newest in imported and (reports / "index.html").is_file():
        report_mod.mark_unrendered(reports, newest, "was imported from its journal: `farm report` renders it")


@main.command()
@click.argument("result_id", type=int)
@farm_options
@handle_errors
def show(result_id: int, config_path: Path, database: str | None) -> None:
    """Print one stored cell result: verdict, provenance, output and logs.

    Example: farm show 12
    """
    from orchestrator.cuda_waiver import FLAG, was_waived
    from orchestrator.outcomes import RAN_AS_EXPECTED
    from orchestrator.report.cell_page import commit_text, driver_text, nvcc_text
    from orchestrator.store.certifying import CERTIFYING_OUTCOMES
    from orchestrator.store.database import Store
    from orchestrator.store.engine import redact_url

    farm = _load(config_path, database, read_only=True)
    store = Store(farm.database_url, create=False)
    r = store.result(result_id)  # None for an id no database holds
    if r is None:
        raise StoreError(f"no result {result_id} in {redact_url(farm.database_url)}")
    say = lambda line: echo(printable(line, keep_newlines=False))  # noqa: E731 - everything shown is stored input
    card = f" ({r.device}, CC {r.cc}" + (f", GPU {r.gpu_index} {r.gpu_uuid}" if r.gpu_uuid else "") + ")"
    say(f"result {r.id} (run {r.run_id}): {r.kernel}:{r.variant} on {r.node}" + (card if r.device else ""))
    say(f"outcome   {r.outcome}" + (f" at {r.failed_stage}" if r.failed_stage else "") + f": {r.reason}")
    say(f"expected  {r.expected}: {r.expected_reason}")
    if was_waived(r):  # the column's word, as the matrix's: a reason's words are no flag
        say(f"flag      {FLAG}: a pass the CUDA-error rule did not look at (`cuda_error_text: expected`)")
    # what the cell page and the exports flag, said here too (a red-team finding: `farm show`
    # printed a pass on a stand-in card, or from a killed run, with no word of either)
    run = store.run(r.run_id)
    status = run.status if run is not None else "unknown"
    ended = {"finished": "finished", "aborted": "did not finish (aborted)", "running": "had not finished (running)"}
    # "certifies nothing" where the outcome would be read as one (green on the pages, or a certifying
    # perf-regression): of a fail it read as if a pass were withheld, where its outcome says it all (review
    # 152; its run and identity lines too, review 153)
    withheld = ": certifies nothing" if r.outcome in {*RAN_AS_EXPECTED, *CERTIFYING_OUTCOMES} else ""
    said = ended.get(status, status) + ("" if status == "finished" or not withheld else ": nothing of it certifies")
    say(
        f"run       {r.run_id} {said}"
        + (f" (a bisection's run, {run.trigger})" if run and run.trigger == "bisect" else "")
    )
    if r.device and not r.real_gpu:
        unconfirmed = "not confirmed by the NVIDIA driver (a stand-in nvidia-smi, or one that misreports it)"
        say(f"card      {unconfirmed}{withheld}")
    if r.farm_writable:  # its code could have written this very record (farm_writable.py)
        say(f"ran       {WHY}{withheld}")
    for flag in _since_flags(store, farm, r):
        say(f"since     {flag}{withheld and withheld + ' now'}")
    # the cell page's provenance in its words: what a certificate is checked against (a review finding, 109)
    say(f"farm commit {commit_text(run.farm_commit if run is not None else None)}")
    say(f"contract  {r.contract}")
    say(f"identity  {r.identity or f'- (not every input identified{withheld})'}")
    for path, sha in r.sources.items():
        say(f"source    {path} sha256 {sha}")
    for dep, d in (r.dependencies or {}).items():
        say(f"dep       {dep} {d.get('version') or ''} digest {d.get('digest')}")
    say(
        f"binary    sha256 {r.binary_sha256 or '-'}; cubins {r.elf_targets}; ptx {r.ptx_targets}; "
        f"code path {r.code_path or '-'}"
    )
    say(f"build     {r.build_command}" + (" (reused)" if r.build_cached else ""))
    snapshot = store.snapshot_rows([r.snapshot_id]).get(r.snapshot_id) if r.snapshot_id is not None else None
    if snapshot is not None:
        if r.device:  # a compile-only cell ran on no card: the cell page names no driver for it either
            say(f"driver    {driver_text(snapshot)}")
        say(f"nvcc      {nvcc_text(snapshot)}")
    say(f"instrs    found {r.instruction_counts}, required {r.required_instructions}")
    say(f"stages    {r.stage_seconds}")
    for one in r.sanitizer or []:
        found = "timed out" if one.get("timed_out") else f"{one.get('errors')} errors"
        cut = one.get("log_cut")  # [start, end, size]: the log's middle was not read (run/sanitize.py)
        said = f" (log of {cut[2]} bytes; bytes {cut[0]} to {cut[1]} not read)" if cut else ""
        say(f"sanitize  {one.get('tool')}: {found}, exit {one.get('exit_code')}{said}")
        if one.get("unchecked"):  # the kernel under the tool (review 243)
            say(f"          it instrumented no CUDA call: {one['unchecked']}")
        if one.get("passed") is False:
            say(f"          no pass marker under it; its last line: {one.get('last_line') or '-'}")
        lines = str(one.get("findings") or "").splitlines()
        at = next((i for i, line in enumerate(lines) if cut and " bytes left out here (" in line), len(lines))
        for line in lines[: min(at, 10)] + lines[at : at + 11]:  # a cut log's first findings, and its last
            say(f"          {line}")
    say(f"exit code {r.exit_code}")
    for name, data, size, sha in (
        ("stdout", r.stdout, r.stdout_size, r.stdout_sha256),
        ("stderr", r.stderr, r.stderr_size, r.stderr_sha256),
    ):
        cut = (r.output_cuts or {}).get(name)
        kept = f"; bytes {cut[0]} to {cut[1]} left out" if cut else ""
        say(f"--- {name} ({size} bytes, sha256 {sha or '-'}{kept})")
        if data:
            echo(quoted(data))
    log_cut = (r.output_cuts or {}).get("build_log")  # [start, end, size] (file_ends.py)
    say("--- build log" + (f" ({log_cut[2]} bytes; bytes {log_cut[0]} to {log_cut[1]} left out)" if log_cut else ""))
    if r.build_log:
        echo(quoted(r.build_log))


def _since_flags(store: Store, farm: Farm, r: Any) -> list[str]:
    """What the matrix flags on `r` where it is its cell's standing verdict: its job or inputs
    changed since (report/grids.since_flags), from the model the site is rendered from."""
    from orchestrator.report.grids import since_flags
    from orchestrator.report.model import collect

    try:
        with store.reading():
            return since_flags(collect(store, None, farm, full=False), r)
    except StoreError:  # no run but a bisection's: no matrix, so no standing verdict to flag
        return []


def quoted(data: bytes | None) -> str:
    """A kernel's stdout or stderr, or its build log, each line behind "  | ": printed as it
    came, a kernel's "outcome   pass" line or a "--- stderr (0 bytes" of its own read as
    `farm show`'s, under or instead of the real ones (a red-team finding)."""
    text = printable((data or b"").decode("utf-8", "replace").rstrip())
    return "\n".join(f"  | {line}" for line in text.split("\n"))
