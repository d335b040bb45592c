"""A pass whose output reached the farm's size limit on what a run writes (commands.OUTPUT_LIMIT, the
run's `ulimit -f`): the writes past it failed (EFBIG; SIGXFSZ where the kernel keeps its default, which
Python and a kernel that ignores it do not), so what it said there, a failure or CUDA's error text,
never reached the farm. Red-team round 228: 256 MiB of output, then "CUDA error: an illegal memory
access was encountered" and exit 0, was a pass."""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from orchestrator.classify.evidence import Evidence
from orchestrator.outcomes import Outcome

V = TypeVar("V")


def output_cut_unbacked(verdict: V, ev: Evidence) -> V:
    """A pass as `fail` where a stream of its run reached the size limit (ev.output_at_limit)."""
    if getattr(verdict, "outcome", None) is not Outcome.PASS or not ev.output_at_limit:
        return verdict
    reason = (
        f"the pass marker was printed and the kernel exited 0, but its {ev.output_at_limit} reached the farm's "
        "size limit on what a run writes (`ulimit -f`): what it printed past the limit (a failure, CUDA's error "
        "text) never reached the farm, so its output backs no pass; print less"
    )
    return replace(verdict, outcome=Outcome.FAIL, failed_stage="run", reason=reason)  # type: ignore[type-var]
