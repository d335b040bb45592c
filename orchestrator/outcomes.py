"""The words a cell can end with, and which of them a reviewer may trust.

An outcome is a verdict about the kernel only when the node worked: infra-error
is the node's fault and never counts for or against a kernel. Expected outcomes
(what the plan derives from a contract) use the same vocabulary.
"""

from __future__ import annotations

from enum import StrEnum

# The stages, in pipeline order: the first two once per node (run/scheduler.py), the
# rest per cell (run/stages/); `sanitize` only for variants that ask for it. Progress,
# the CLI, the store and the report read these names from here.
STAGES = ("probe", "stage", "build", "inspect", "run", "sanitize")
NODE_STAGES = STAGES[:2]
CELL_STAGES = STAGES[2:]
KERNEL_STAGES = STAGES[STAGES.index("run") :]  # the ones that start the kernel on the cell's GPU


class Outcome(StrEnum):
    PASS = "pass"  # ran on a card it must serve and printed its pass marker
    EXPECTED_REFUSAL = "expected-refusal"  # refused, with its gate's text, a card it must refuse
    FAIL = "fail"  # ran where it must run and did not pass (wrong numbers, crash)
    UNEXPECTED_REFUSAL = "unexpected-refusal"  # refused a card its contract says it serves
    MISSING_REFUSAL = "missing-refusal"  # must refuse, but ran, crashed or gave no refusal text
    BUILD_FAIL = "build-fail"
    INSPECT_FAIL = "inspect-fail"  # machine code lacks a required instruction, or no dump
    TIMEOUT = "timeout"  # the run outlived its timeout and was killed on the node
    INFRA_ERROR = "infra-error"  # node unreachable, dropped session: not a kernel verdict
    COMPILE_ONLY = "compile-only"  # built and inspected; the node has no GPU to run on
    KNOWN_FAILURE = "known-failure"  # failed exactly as a job's known_failures declares
    FIXED = "fixed"  # a declared known failure that now behaves as the contract says
    NOT_RUN = "not-run"  # the run ended (killed, aborted) before this cell finished
    # passed its numbers, but a metric is worse than its cell's recent median by more than its tolerance
    PERF_REGRESSION = "perf-regression"
    # passed its numbers, but compute-sanitizer (the variant's `sanitize` tools) reported errors
    SANITIZER_ERROR = "sanitizer-error"


# Outcomes that leave a run green: the cell behaved as its plan said it would. A
# perf-regression is not among them (the run exits 1, so the night's reader sees it),
# although its numbers were right: it still certifies (store/certifying.py _certifying).
AS_EXPECTED = frozenset(
    {
        Outcome.PASS,
        Outcome.EXPECTED_REFUSAL,
        Outcome.COMPILE_ONLY,
        Outcome.KNOWN_FAILURE,
        Outcome.FIXED,
    }
)

# The as-expected outcomes of a kernel that ran on its card: the ones a card the driver did not
# confirm, or a run unconfined on the farm's own machine, leave certifying nothing
# (report.model.unconfirmed, and its SQL form store.certifying.unconfirmed_rule; a run's lines, progress.py).
RAN_AS_EXPECTED = (Outcome.PASS.value, Outcome.EXPECTED_REFUSAL.value, Outcome.FIXED.value)

# Outcomes that are the infrastructure's, not the kernel's.
INFRA = frozenset({Outcome.INFRA_ERROR, Outcome.NOT_RUN})


# A word a database holds that this farm does not know (a newer farm's, or a hand's edit) is
# neither: it counts as not as expected, never green (it was "a bug in farm": a red-team finding)
_WORDS = frozenset(o.value for o in Outcome)


def is_as_expected(outcome: Outcome | str) -> bool:
    return outcome in _WORDS and Outcome(outcome) in AS_EXPECTED


def is_infra(outcome: Outcome | str) -> bool:
    return outcome in _WORDS and Outcome(outcome) in INFRA


# a not-run cell's reasons, written by classify/ (an operator's stop) and store/recovery.py (a farm
# that died mid-run), read back by report/no_verdict.py to say whose doing it was: one wording here
STOPPED_REASON = "the run was stopped ({why}) before this cell finished"
FOUND_AT_NEXT_START = "(found at the next start)"
FROM_JOURNAL = "(from its journal)"
# store/rebuilding.py: what a run journaled after another farm's start closed it is no verdict
CLOSED_BEFORE = "another farm's start closed the run before this cell finished (what it journaled after is no verdict)"
