"""bench/novel/: kernels of kinds the course has not, which bench/novel.sh runs on the lent GPU
(README, "For reviewers"). Here: their farm loads and plans one cell per job, each build names
{binary} and its sources, so the lent machine's call does not fail on a job file that rotted."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.farm import load_farm
from orchestrator.plan import plan_cells

NOVEL = Path(__file__).resolve().parent.parent / "bench" / "novel"


def test_the_novel_kernels_farm_loads_and_plans_each_job() -> None:
    farm = load_farm(NOVEL / "farm.yaml")
    cells = plan_cells(farm, None, None)
    assert sorted((c.kernel, c.variant) for c in cells) == [
        ("cdp", "sm90"),
        ("cluster", "sm90"),
        ("coop_grid", "sm90"),
        ("crashy", "sm90"),
        ("cublas", "sm90"),
        ("devprintf", "sm90"),
        ("fp8", "sm90"),
        ("future", "sm100"),
        ("offbyone", "sm90"),
        ("rdc", "sm90"),
    ]
    for job in (NOVEL / "jobs").glob("*.yaml"):
        assert "-o {binary} {sources}" in job.read_text(), job
