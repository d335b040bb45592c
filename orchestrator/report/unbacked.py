"""Why an as-expected cell certifies nothing, every reason in words: its outcome (a known failure,
compile-only), its card or where it ran (farm_writable.py), its run (did not finish), and what
changed since (its job, its node left the fleet). The JUnit export's skipped message and the JSON
export's `certifies_nothing_why` are made from one list: each had named the first reason alone, so a
farm-writable pass of a run that did not finish read as only one of the two (review 141)."""

from __future__ import annotations

from typing import Any

from orchestrator.farm_writable import WHY
from orchestrator.outcomes import Outcome, is_as_expected
from orchestrator.report.model import unconfirmed

STANDIN = "on a card the NVIDIA driver did not confirm (a stand-in nvidia-smi, or one that misreports it)"
# no identity (store/records.py: a dependency the staging did not digest): nothing ties it to the bytes
UNIDENTIFIED = "of inputs the farm did not all identify (no identity ties it to the kernel's bytes)"

COMPILE_ONLY = "compile-only: built and inspected on a node without a GPU; the kernel never ran"


def reasons(r: Any, run_status: str, moot: str | None = None, left: str | None = None) -> list[str]:
    """Each reason the as-expected result `r` certifies nothing, first its own (outcome, card, where it
    ran), then its run's (`run_status` not finished), then what changed since (`moot`: its job, as
    export.rejudged says; `left`: its node's or card's leaving, as export.left_fleet says). Empty where it
    certifies (or is no as-expected verdict at all: a fail's outcome is its reason)."""
    if not is_as_expected(r.outcome):
        return []
    said = []
    if r.outcome == Outcome.KNOWN_FAILURE:
        said.append(f"known failure: {r.known_failure_reason}")
    elif r.outcome == Outcome.COMPILE_ONLY:
        said.append(COMPILE_ONLY)
    if unconfirmed(r) and (why := certifies_nothing_why(r)):
        said.append(why)
    if run_status != "finished":
        said.append(f"in run {r.run_id}, which did not finish ({run_status})")
    if moot:
        said.append(f"the job changed since: {moot}")
    if left:
        said.append(left)  # ReportModel.left's words: its node left the fleet, or its card the node
    return said


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
