"""Review round 253: the night operator's morning after a run that did not finish.

Found (before/after):
- `farm verify` stopped by SIGTERM ended on "run 2: 2 as expected, 0 not, 3 infra; exit 4 (every
  verdict as expected, but some cells could not run (infra))": the stop's not-run cells blamed on the
  nodes, and "every verdict as expected" read green. Now "0 infra, 3 not-run (stopped by SIGTERM);
  exit 4 (the run did not finish: stopped by SIGTERM; not green)".
- A stopped run's page said "certifies nothing" under every cell, its not-run ones too (and a kernel
  page's grid under its fails): noise around the banner, the one line that matters. Now only an
  as-expected verdict (the one that would otherwise read green) carries the words and the grey.
- The banner of a run stored `running` whose farm was SIGKILLed said "did not finish (running)" and
  nothing to do. Now it says the next `farm verify` stores it aborted, and the command to run it again.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from orchestrator.cli.verify import verdict_line
from orchestrator.report import grids
from orchestrator.run.summary import RunSummary


def test_a_stopped_runs_last_line_blames_the_stop_not_the_nodes() -> None:
    """Before: "3 infra; exit 4 (every verdict as expected, but some cells could not run (infra))"
    after a SIGTERM. Figure: the not-run cells counted as the stop's, the exit said not green."""
    summary = RunSummary(run_id=2, outcomes=Counter({"pass": 2, "not-run": 3}), stopped="SIGTERM")
    line = verdict_line(summary)
    assert "could not run (infra)" not in line, line
    assert "every verdict as expected" not in line, line
    assert "0 infra, 3 not-run (stopped by SIGTERM)" in line, line
    assert "exit 4 (the run did not finish: stopped by SIGTERM; not green)" in line, line


def test_a_finished_runs_last_line_is_unchanged() -> None:
    """Before and after: a finished run with an infra cell says infra (the node's trouble)."""
    summary = RunSummary(run_id=3, outcomes=Counter({"pass": 1, "infra-error": 1}))
    assert verdict_line(summary).startswith("run 3: 1 as expected, 0 not, 1 infra; exit 4 (every verdict"), summary


def test_a_stopped_runs_page_flags_only_its_as_expected_cells() -> None:
    """Before: every cell of a run that did not finish read "certifies nothing", its not-run ones
    too. Figure: the pass is grey and says so; the not-run and the fail carry no such words."""
    cells = {
        ("k", "a", "n", "T4"): ("pass", 6),
        ("k", "b", "n", "T4"): ("not-run", 7),
        ("k", "c", "n", "T4"): ("fail", 8),
    }
    for linked in (True, False):
        rows = {v: str(html) for _k, v, html in grids.run_matrix(cells, [("n", "T4")], linked, {6, 7, 8})}
        assert "certifies nothing" in rows["a"] and "unconfirmed" in rows["a"], rows["a"]
        assert "certifies nothing" not in rows["b"] and "unconfirmed" not in rows["b"], rows["b"]
        assert "certifies nothing" not in rows["c"] and "unconfirmed" not in rows["c"], rows["c"]


def test_a_kernel_grids_fail_of_an_unfinished_run_is_not_flagged() -> None:
    """Before: a kernel page's grid said "certifies nothing" under a fail of a run that did not
    finish. Figure: only its pass does."""
    assert "certifies nothing" in grids._outcome_td("pass", True)
    assert "certifies nothing" not in grids._outcome_td("fail", True)
    assert "certifies nothing" not in grids._outcome_td("not-run", True)


def test_a_killed_runs_banner_says_what_to_do() -> None:
    """Before: "Run 2 did not finish (running): ... not green" and no next step for a run whose farm
    was SIGKILLed. Figure: the banner names the next verify and the command that runs it again."""
    from jinja2 import Environment, PackageLoader

    env = Environment(loader=PackageLoader("orchestrator.report", "templates"), autoescape=True)
    run = SimpleNamespace(id=2, status="running", exit_code=None, selection="--all", config_file="/f/farm.yaml")
    text = env.get_template("incomplete.html.j2").render(run=run)
    assert "did not finish (running)" in text, text
    assert "stores it aborted" in text, text
    assert "farm verify --all --config /f/farm.yaml" in text, text
