"""A result the farm cannot back: its cell's code ran unconfined (the shell runner, a node kernel
without Landlock) on a `local` node, the farm's own machine, as the farm's own Unix user, who can
write results.db, its journal and the reports by path (red-team round 135, left open there). Its
outcome stands (its numbers did pass) but, like a stand-in card's pass, it certifies nothing
(review 137). Stored as results.farm_writable (0016) when the result is written, and read by the
one certifying rule (store/certifying.py) and by report.model.unconfirmed, whose greys every page
and export shares; the words here say why. An SSH node's unconfined kernel cannot reach the farm's
database: only `local` is affected."""

from __future__ import annotations

from typing import Any

WHY = "ran unconfined on the farm's own machine as the farm's user, who can write results.db"
STANDIN = "on a card the NVIDIA driver did not confirm (a stand-in nvidia-smi, or one that misreports it)"
# no identity (store/records.py: a dependency the staging did not digest): nothing ties it to the bytes
UNIDENTIFIED = "of inputs the farm did not all identify (no identity ties it to the kernel's bytes)"


def farm_writable(transport: str, ran_unconfined: bool) -> bool:
    """Whether a result is the farm's to doubt: its code ran unconfined on the farm's own machine."""
    return transport == "local" and ran_unconfined


def certifies_nothing_why(r: Any) -> str | None:
    """Why an as-expected result certifies nothing by report.model.unconfirmed: its card, where it
    ran, its inputs not all identified (a result may be several: each is said). None where none holds."""
    said = [STANDIN] if r.device and not r.real_gpu else []
    said += [WHY] if r.farm_writable else []
    return "; ".join([*said, UNIDENTIFIED] if not r.identity else said) or None


def run_words(counts: tuple[int, int, int, int]) -> str:
    """history.html's words for a run's as-expected results that certify nothing, each reason with its
    count (Store.unconfirmed_reasons: all, on a stand-in card, farm writable, no identity): it had
    called them all cards the driver did not confirm (review 141)."""
    total, standin, writable, unidentified = counts
    said = [f"{standin} on a card the NVIDIA driver did not confirm"] if standin else []
    said += [f"{writable} {WHY}"] if writable else []
    said += [f"{unidentified} {UNIDENTIFIED}"] if unidentified else []
    return f"{', '.join(said)}: certif{'ies' if total == 1 else 'y'} nothing"


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
