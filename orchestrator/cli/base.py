"""The command line's shared parts: the `farm` group, its common options, and each failure
as one "Error: ..." line and its documented exit code."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli.once import OnceGroup
from orchestrator.errors import EXIT_CONFIG, EXIT_INTERNAL, EXIT_SIGPIPE, ConfigError, FarmError
from orchestrator.terminal import printable

if TYPE_CHECKING:  # the pipeline's modules are imported by the commands that use them: `farm --help` needs none
    from orchestrator.config.farm import Farm


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


def echo(text: str = "", nl: bool = True) -> None:
    """A line of a command's own output to stdout, flushed: stdout that cannot be written (a
    cron job's `farm report --format junit > /srv/ci/junit.xml` on a full disk) is exit 3 saying
    so, as an --out that cannot be written is; it was "internal error (OSError: No space left on
    device); this is a bug in farm", exit 70 (round 93). A reader that stopped reading is
    BrokenPipeError, handle_errors' exit 141."""
    try:
        click.echo(text, nl=nl)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        with contextlib.suppress(OSError):  # what is still buffered would fail again at exit (status 120)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise ConfigError(
            "stdout",
            "",
            f"a stream that cannot be written ({err.strerror or err}): what was printed is cut short",
            "a writable stdout",
            "`farm report --format junit|json --out FILE` writes an export whole or not at all.",
        ) from err


def _load(config_path: Path, database: str | None, *, read_only: bool = False, opens_database: bool = True) -> Farm:
    # show and report only read the database: they need no CUTLASS installed, and a
    # database that is not there is theirs to report ("no results database at")
    from orchestrator.config.database_url import check_database_folder, check_sqlite_timeout
    from orchestrator.config.farm import load_farm

    farm = load_farm(config_path, database=database, check_dependencies=not read_only, database_where=database_origin())
    where = database_origin() if database else str(farm.file)
    if not opens_database:
        # `jobs` and `nodes` never open it: a database on a disk not mounted refused them, exit 3, and
        # the operator could not look at the fleet while it was away (a red-team finding)
        return farm
    if not read_only:
        check_database_folder(farm.database_url, where)
    else:
        check_sqlite_timeout(farm.database_url, where)
    return farm


def database_origin() -> str:
    """Where the command's database URL came from, as its errors name it: --database, or the
    FARM_DATABASE that click reads for it (a bad URL in the environment was reported as
    `--database: ...`, an option nobody typed: red-team 77)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.get_parameter_source("database") == click.core.ParameterSource.ENVIRONMENT:
        return "FARM_DATABASE"
    return "--database"


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
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # the reader stopped reading (`farm show 1 | head`): no error of ours
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more at exit
            sys.exit(EXIT_SIGPIPE)
        except Exception as err:  # the last line of defence
            plan = sys.modules.get("orchestrator.plan")  # a selection names what is not there: imported if raised
            if plan is not None and isinstance(err, plan.SelectionError):
                click.echo(f"Error: {printable(str(err))}", err=True)
                sys.exit(EXIT_CONFIG)
            click.echo(
                f"Error: internal error ({type(err).__name__}: {printable(str(err), keep_newlines=False)}); "
                "this is a bug in farm, not a verdict",
                err=True,
            )
            sys.exit(EXIT_INTERNAL)

    return wrapper


@click.group(cls=OnceGroup)
@click.version_option(package_name="farm")
def main() -> None:
    """A multi-architecture GPU test farm: build, inspect and run every kernel
    variant on every node, classify each cell, store it, render the matrix.

    Example: farm verify --all
    """
    from orchestrator.cli.started import settle

    settle()  # cron's closed descriptors and a umask of the owner's bits, before any file is opened
    unblock_farm_signals()


# what the farm and the processes it starts rely on being delivered: SIGCHLD (a shell's `wait`, a local
# node's stages), SIGTERM, SIGINT and SIGHUP (a stop: cli/prerun.py, verify's handlers), SIGALRM (a
# local node runner's bounded GPU lock, lock_within)
FARM_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM)


def unblock_farm_signals() -> None:
    """Delivers FARM_SIGNALS to this process, whatever mask it inherited: a blocked signal stays blocked
    across exec and into every child. A farm started with SIGCHLD blocked (a parent that had blocked it,
    as a pytest worker had: tests/conftest.py) ran a local node's stage shells with it blocked, and
    dash's `wait` never woke: the cell hung until its stage's timeout, infra-error (review 168)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FARM_SIGNALS)


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
    from orchestrator.store.queries import BISECT_TRIGGER  # here: `farm --help` imports no store

    if value == BISECT_TRIGGER:  # such runs are left out of the standing and the latest run: a red night vanished
        raise click.BadParameter(f"{value!r} is `farm bisect`'s runs' own trigger; give another")
    return value
