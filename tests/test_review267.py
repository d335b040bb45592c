"""Review round 267: what a night operator reads when a run lost a node (review 264's open items).

Found (before/after):
- The line naming a lost node and its rerun went to stdout only: `farm verify --log FILE`, cron's log,
  ended on "2 infra; exit 4" with no node and no command. Now the log holds the same line (and a stopped
  run's "run it again" line), dated, before its verdict line.
- The printed command had no --database: a run on a database other than farm.yaml's (--database or
  FARM_DATABASE) was rerun, as printed, into farm.yaml's database, and its `--config` was the path as
  typed, relative to cron's working folder. Now it names the run's database (its password as ***, said)
  and farm.yaml by an absolute path; run as printed, from another folder, it reruns just those cells
  into the same database.
- The verdict line counted not-run as infra unless the run was stopped ("3 infra" for one infra-error and
  two not-run), and --log's verdict line did so even for a stopped run. Both now say "1 infra, 2 not-run"
  where cells were not run, as history.html and the JSON summary tell the two apart; exit codes unchanged.
- A run stopped by SIGTERM that had also lost a node said only the stop's line: the broken node went
  unnamed. Now the lost node's line follows, naming its infra-error cells alone (the stop's not-run cells
  are the stop's line's).
"""

from __future__ import annotations

import io
import re
import shlex
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from farm_cli import farm
from nodes import CARDS, Fleet, query, standin_job, standin_variant, write_farm

from orchestrator.outcomes import Outcome
from orchestrator.run.summary import RunSummary

MIN75 = {"min": "7.5"}
STAMP = r"\[\d\d:\d\d:\d\d\] "


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    nodes = Fleet(tmp_path / "fleet")
    try:
        nodes.add("a", CARDS["t4"])
        nodes.add("b", CARDS["t4"], start=False)  # down: its cells are infra-error
        yield nodes
    finally:
        nodes.stop()


def test_the_lost_nodes_rerun_is_in_the_log_and_reruns_into_the_runs_own_database(fleet: Fleet, tmp_path: Path) -> None:
    """Before: `farm verify --all --config farm.yaml --database sqlite:///.../scratch.db --log FILE` printed
    "to rerun just them: farm verify --all --node b --config farm.yaml" on stdout only; the log's last lines
    were b's cause and "2 infra; exit 4", and the command, run as printed, stored its run in farm.yaml's
    results.db. Figure: stdout and the log both say the line (the log's dated, just before its verdict),
    whose command names the scratch database and farm.yaml's absolute path; once b is back, run as printed
    from another folder, it stores run 2 in scratch.db with b's two cells, pass, and results.db gets none."""
    nodes = {n: fleet[n].farm_entry(tmp_path / f"work-{n}", connect_timeout=1) for n in ("a", "b")}
    variants = {"one": standin_variant("PASS", MIN75, "MIN_CC=75"), "two": standin_variant("PASS", MIN75, "MIN_CC=75")}
    root = tmp_path / "farm"
    write_farm(root, nodes, [standin_job("standin", variants)], retries=0)
    scratch = tmp_path / "scratch" / "scratch.db"
    scratch.parent.mkdir()
    url = f"sqlite:///{scratch}"
    log = tmp_path / "logs" / "farm.log"
    args = ("verify", "--all", "--config", "farm.yaml", "--database", url, "--log", str(log))
    done = farm(*args, cwd=root, timeout=300)
    assert done.returncode == 4, done.stdout + done.stderr
    again = shlex.join(
        ["farm", "verify", "--all", "--node", "b", "--config", str(root / "farm.yaml"), "--database", url]
    )
    said = (
        f"run 1: 2 cells could not run on node b (2 infra-error; `farm show ID` says why); to rerun just them: {again}"
    )
    lines = done.stdout.splitlines()
    assert lines[-2:] == [said, lines[-1]] and lines[-1].startswith("run 1: 2 as expected, 0 not, 2 infra; exit 4")
    logged = log.read_text().splitlines()
    assert re.fullmatch(STAMP + re.escape(said), logged[-2]), logged[-3:]
    assert re.fullmatch(STAMP + r"run 1: 2 as expected, 0 not, 2 infra; exit 4.*", logged[-1]), logged[-3:]

    fleet["b"].start()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rerun = farm(*shlex.split(again)[1:], cwd=elsewhere, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    cells = query(scratch, "SELECT node, variant, outcome FROM results WHERE run_id = 2 ORDER BY variant")
    assert [tuple(c) for c in cells] == [("b", "one", "pass"), ("b", "two", "pass")], [tuple(c) for c in cells]
    assert not (root / "results.db").exists() or not query(root / "results.db", "SELECT id FROM runs")


def test_the_verdict_lines_tell_infra_error_from_not_run() -> None:
    """Before: a finished run with 1 infra-error and 2 not-run cells ended on "3 infra; exit 4" on the
    terminal and in --log, and --log's line of a stopped run said "3 infra" of the stop's cells. Figure:
    "1 infra, 2 not-run; exit 4" on both, "0 infra, 3 not-run (stopped by SIGTERM)" in --log too; a run
    with infra-error alone still says "N infra; exit 4", and the exit codes are as they were."""
    from orchestrator.cli.verify import verdict_line
    from orchestrator.progress import PlainListener

    def log_line(summary: RunSummary) -> str:
        stream = io.StringIO()
        PlainListener(stream, verdict=True).run_finished(summary)
        return stream.getvalue().splitlines()[-1]

    both = RunSummary(run_id=5, outcomes=Counter({"pass": 1, "infra-error": 1, "not-run": 2}))
    assert "1 as expected, 0 not, 1 infra, 2 not-run; exit 4 (every verdict" in verdict_line(both), verdict_line(both)
    assert log_line(both).endswith("run 5: 1 as expected, 0 not, 1 infra, 2 not-run; exit 4"), log_line(both)
    stopped = RunSummary(run_id=6, outcomes=Counter({"pass": 2, "not-run": 3}), stopped="SIGTERM")
    assert log_line(stopped).endswith("0 infra, 3 not-run (stopped by SIGTERM); exit 4"), log_line(stopped)
    alone = RunSummary(run_id=7, outcomes=Counter({"pass": 1, "infra-error": 2}))
    assert " 2 infra; exit 4 (" in verdict_line(alone) and log_line(alone).endswith("2 infra; exit 4")
    assert (both.exit_code, stopped.exit_code, alone.exit_code) == (4, 4, 4)
    failed = RunSummary(run_id=8, outcomes=Counter({"fail": 1, "not-run": 1}))
    assert "0 not" not in verdict_line(failed) and "1 not, 0 infra, 1 not-run; exit 1" in verdict_line(failed)


def _result(variant: str, node: str, outcome: Outcome) -> tuple[object, object, int]:
    cell = SimpleNamespace(kernel="k", variant=variant, node=node)
    return cell, SimpleNamespace(verdict=SimpleNamespace(outcome=outcome)), 0


def test_a_stopped_run_that_lost_a_node_names_the_node_after_the_stops_line() -> None:
    """Before: a run stopped by SIGTERM, node b's cells infra-error (down) and a's unfinished ones not-run,
    said only "run 9 was stopped by SIGTERM: ...; run it again: farm verify k --config ...". Figure: that
    line, then "run 9: 2 cells could not run on node b (2 infra-error; ...); to rerun just them: farm verify
    k --node b ...": node b named, its infra-error cells alone (a's not-run ones are the stop's)."""
    from orchestrator.run.summary import NextSteps  # imported here: before the fix it did not exist

    results = [
        _result("x", "a", Outcome.PASS),
        _result("y", "a", Outcome.NOT_RUN),
        _result("x", "b", Outcome.INFRA_ERROR),
        _result("y", "b", Outcome.INFRA_ERROR),
    ]
    counts = Counter({"pass": 1, "not-run": 1, "infra-error": 2})
    summary = RunSummary(run_id=9, outcomes=counts, results=results, stopped="SIGTERM")  # type: ignore[arg-type]
    lines = NextSteps(["k"], False, [], Path("/f/farm.yaml"), None)(summary)
    assert lines == [
        "run 9 was stopped by SIGTERM: its unfinished cells are not-run; "
        "for their verdicts run it again: farm verify k --config /f/farm.yaml",
        "run 9: 2 cells could not run on node b (2 infra-error; `farm show ID` says why); "
        "to rerun just them: farm verify k --node b --config /f/farm.yaml",
    ], lines
    summary.results = [r for r in results if r[0].node == "a"]  # type: ignore[attr-defined]
    assert len(NextSteps(["k"], False, [], Path("/f/farm.yaml"), None)(summary)) == 1  # no node lost: the stop's


def test_a_database_password_is_never_printed_in_the_rerun() -> None:
    """Figure: a run on a server database whose URL holds a password names it with *** where the password
    was, and says the command needs it back; the password is in no line."""
    from orchestrator.run.summary import NextSteps

    summary = RunSummary(run_id=3, outcomes=Counter({"not-run": 1}), results=[_result("x", "a", Outcome.NOT_RUN)])  # type: ignore[arg-type]
    steps = NextSteps([], True, ["a"], Path("/f/farm.yaml"), "postgresql+psycopg://farm:s3cret@db.example/farm")
    summary.stopped = "SIGTERM"
    (line,) = steps(summary)
    assert "s3cret" not in line, line
    assert line.endswith(
        "run it again (with the database's password where *** stands: it is not printed): farm verify --all "
        "--node a --config /f/farm.yaml --database 'postgresql+psycopg://farm:***@db.example/farm'"
    ), line
