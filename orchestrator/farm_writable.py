"""A result the farm cannot back: its cell's code ran unconfined (the shell runner, a node kernel
without Landlock) on a `local` node, the farm's own machine, as the farm's own Unix user, who can
write results.db, its journal and the reports by path (red-team round 135, left open there). Its
outcome stands (its numbers did pass) but, like a stand-in card's pass, it certifies nothing
(review 137). Stored as results.farm_writable (0016) when the result is written, and read by the
one certifying rule (store/certifying.py) and by report.model.unconfirmed, whose greys every page
and export shares; WHY says it (report/unbacked.py says it beside the other reasons). An SSH
node's unconfined kernel cannot reach the farm's database: only `local` is affected."""

from __future__ import annotations

from typing import Any

WHY = "ran unconfined on the farm's own machine as the farm's user, who can write results.db"


def farm_writable(transport: str, ran_unconfined: bool) -> bool:
    """Whether a result is the farm's to doubt: its code ran unconfined on the farm's own machine."""
    return transport == "local" and ran_unconfined


def ledger_flags(passes: list[Any]) -> list[tuple[str, str]]:
    """A kernel page's flags for its current inputs' passes that certify nothing for being farm
    writable (store.certifying.farm_writable_passes rows: kernel, identity, cc, passes, last_id)."""
    return [
        (
            "farm-writable",
            f"CC {p.cc}: {p.passes} pass{'es' if p.passes != 1 else ''} of these inputs (latest: result "
            f"{p.last_id}) {WHY}: {'they certify' if p.passes != 1 else 'it certifies'} nothing.",
        )
        for p in passes
    ]
