"""Review of rounds 155-159 (helper review161).

1. A module reload first seen by the sanitize stage (after a clean run) was stored with failed_stage
   "run": the run had seen the probe's module, and a reader looking at the run stage found nothing
   there. The stage named is now the one whose read found the reload.
2. After one cell's ECC errors rose over the probe's count, every later failing cell on that card
   said the card "took N uncorrectable ECC errors during the cell": the count is against the probe's,
   at the run's start, so the words now say "since the node's probe".
"""

from __future__ import annotations

from pathlib import Path

from nodes import standin_job, standin_variant
from test_redteam157 import EVIDENCE, PROBED, RELOADED, T4, _node
from test_redteam159 import _reload_when_sanitized
from test_verdicts import MIN75, rows, run

from orchestrator.classify import Evidence, classify
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run import gpu_state
from orchestrator.run.driver_check import module_changed


def test_a_reload_seen_by_the_sanitize_stage_fails_the_sanitize_stage(make_farm, tmp_path: Path) -> None:
    from nodes import install_sanitizer

    node = _node(tmp_path / "node", PROBED)
    install_sanitizer(node)
    node.start()
    try:
        variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=_reload_when_sanitized(tmp_path))
        variant["sanitize"] = ["memcheck"]
        entry = node.farm_entry(tmp_path / "work")
        config = make_farm(tmp_path / "farm", {"reloads": entry}, [standin_job("standin", {"v": variant})], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    [row] = rows(tmp_path / "farm" / "results.db", summary.run_id).values()
    assert row["outcome"] == "infra-error", row["reason"]
    assert "535.104.05" in row["reason"] and T4.driver in row["reason"], row["reason"]
    assert row["failed_stage"] == "sanitize", (row["failed_stage"], row["reason"])


def test_a_reload_seen_by_the_run_keeps_the_run_stage() -> None:
    """Guard: the run's own read names the run, whatever the sanitize stage read after it."""
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=0, pass_line=3, kernel_started=True)
    ev.kernel_exit = 0
    ev.driver_reloaded = module_changed(EVIDENCE, RELOADED)
    verdict = classify(ev, Expectation(Outcome.PASS, "CC 7.5 is served"))
    assert verdict.outcome is Outcome.INFRA_ERROR and verdict.failed_stage == "run", verdict


def test_ecc_errors_over_the_probes_count_are_not_said_to_be_the_cells_own() -> None:
    """3 at the probe, 5 after this cell's failed run: two came since the probe, not necessarily during
    this cell (an earlier cell on the card may have taken them)."""
    why = gpu_state.gpu_unfit("GPU-x", "/w", "Disabled, Default, 5", "", "3")
    assert "2 uncorrectable ECC errors since the node's probe" in why, why
    assert "during the cell" not in why, why
    assert gpu_state.gpu_unfit("GPU-x", "/w", "Disabled, Default, 3", "", "3") == ""  # guard: none new
