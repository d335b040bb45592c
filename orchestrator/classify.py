"""From what the stages saw to one outcome word: a pure function, tested as a table.

Order matters and mirrors the pipeline: an infra failure anywhere wins (the node
is at fault, not the kernel); then build, inspect; a node without a GPU stops
there (compile-only); then the run, judged against the expectation. A declared
known failure is applied last: the same failure becomes known-failure, and the
expected behaviour becomes fixed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .outcomes import Outcome
from .plan import Expectation

STAGES = ("probe", "stage", "build", "inspect", "run")


@dataclass
class Evidence:
    """What the stages of one cell observed. Missing parts mean "not reached"."""

    infra_stage: str | None = None  # stage that hit an InfraError
    infra_detail: str = ""
    infra_retryable: bool = True  # False: another attempt would fail the same way (InfraError.retryable)
    build_exit: int | None = None
    inspect_exit: int | None = None
    missing_instructions: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (found, needed)
    run_exit: int | None = None
    run_timed_out: bool = False
    stdout: bytes = b""
    stderr: bytes = b""


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    failed_stage: str | None  # the stage that decided a bad outcome
    reason: str


def _search(pattern: str, data: bytes) -> bool:
    return re.search(pattern, data.decode("utf-8", "replace")) is not None


def _raw_verdict(ev: Evidence, exp: Expectation, pass_marker: str, refusal_marker: str) -> Verdict:
    if ev.infra_stage is not None:
        detail = ev.infra_detail or f"the node failed during {ev.infra_stage}"
        return Verdict(Outcome.INFRA_ERROR, ev.infra_stage, detail)
    if ev.build_exit is None:
        return Verdict(Outcome.NOT_RUN, "build", "the build never finished")
    if ev.build_exit != 0:
        return Verdict(Outcome.BUILD_FAIL, "build", f"the build exited {ev.build_exit}")
    if ev.inspect_exit is None:
        return Verdict(Outcome.NOT_RUN, "inspect", "inspection never finished")
    if ev.inspect_exit != 0:
        return Verdict(Outcome.INSPECT_FAIL, "inspect", f"the disassembler exited {ev.inspect_exit}")
    if ev.missing_instructions:
        missing = ", ".join(f"{n} ({f} < {w})" for n, (f, w) in sorted(ev.missing_instructions.items()))
        return Verdict(Outcome.INSPECT_FAIL, "inspect", f"required instructions missing: {missing}")
    if exp.outcome is Outcome.COMPILE_ONLY:
        return Verdict(Outcome.COMPILE_ONLY, None, "built and inspected; no GPU to run on")
    if ev.run_timed_out:
        return Verdict(Outcome.TIMEOUT, "run", "killed at its timeout")
    if ev.run_exit is None:
        return Verdict(Outcome.NOT_RUN, "run", "the run never finished")
    passed = ev.run_exit == 0 and _search(pass_marker, ev.stdout)
    refused = ev.run_exit != 0 and _search(refusal_marker, ev.stderr)
    if exp.outcome is Outcome.PASS:
        if passed:
            return Verdict(Outcome.PASS, None, "exit 0 and the pass marker on stdout")
        if refused:
            return Verdict(
                Outcome.UNEXPECTED_REFUSAL,
                "run",
                f"refused a card its contract serves ({exp.reason})",
            )
        if ev.run_exit == 0:
            return Verdict(Outcome.FAIL, "run", "exit 0 but no pass marker on stdout")
        return Verdict(Outcome.FAIL, "run", f"exit {ev.run_exit} without the pass marker")
    # the contract says this card must be refused
    if refused:
        return Verdict(Outcome.EXPECTED_REFUSAL, None, "refused with its gate's text, as it must")
    if passed or ev.run_exit == 0:
        return Verdict(Outcome.MISSING_REFUSAL, "run", f"ran on a card it must refuse ({exp.reason})")
    return Verdict(Outcome.MISSING_REFUSAL, "run", f"exit {ev.run_exit} without the refusal text on stderr")


def classify(ev: Evidence, exp: Expectation, pass_marker: str, refusal_marker: str) -> Verdict:
    verdict = _raw_verdict(ev, exp, pass_marker, refusal_marker)
    known = exp.known_failure
    if known is None or verdict.outcome in (Outcome.INFRA_ERROR, Outcome.NOT_RUN):
        return verdict
    if verdict.outcome is known.outcome:
        return Verdict(Outcome.KNOWN_FAILURE, verdict.failed_stage, f"known failure: {known.reason}")
    if verdict.outcome is exp.outcome:
        return Verdict(
            Outcome.FIXED,
            None,
            f"behaves as its contract says although a known failure is declared "
            f"({known.reason}); remove the declaration",
        )
    return verdict
