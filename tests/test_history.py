"""history.changes as a table: a cell's verdict now against its earlier ones."""

from __future__ import annotations

import pytest

from orchestrator.report.history import changes

KEY = ("k", "v", "n", "")

TABLE = [
    # (earlier outcomes oldest first, now, change)
    ([], "pass", "new"),
    ([], "fail", "new-failure"),
    ([], "infra-error", "infra"),
    (["pass"], "pass", "unchanged"),
    (["compile-only"], "pass", "changed"),
    (["pass"], "fail", "regression"),
    (["pass"], "timeout", "regression"),
    (["expected-refusal"], "missing-refusal", "regression"),
    (["fail"], "pass", "fixed"),
    (["build-fail"], "known-failure", "fixed"),
    (["fail"], "fail", "still-failing"),
    (["fail"], "build-fail", "still-failing"),
    (["pass", "infra-error"], "fail", "regression"),  # infra results carry no verdict
    (["fail", "infra-error", "infra-error"], "pass", "fixed"),
    (["pass"], "infra-error", "infra"),
    (["pass", "fail"], "pass", "unstable"),  # two flips
    (["fail", "pass", "pass"], "fail", "unstable"),
    (["pass", "fail", "pass", "pass", "pass", "pass", "pass", "pass", "pass", "pass", "pass"], "pass", "unchanged"),
    (["pass", "fail", "fail", "fail", "fail", "fail", "fail", "fail", "fail", "fail"], "pass", "fixed"),
]


@pytest.mark.parametrize(("earlier", "now", "expected"), TABLE)
def test_changes_table(earlier, now, expected):
    history = {KEY: [(i + 1, outcome) for i, outcome in enumerate(earlier)]}
    change = changes([(KEY, now)], history)[KEY]
    assert change.change == expected
    assert change.outcome == now
    assert change.label == "k:v@n"


def test_previous_run_is_the_latest_verdict():
    history = {KEY: [(1, "pass"), (2, "expected-refusal"), (3, "infra-error")]}
    change = changes([(KEY, "fail")], history)[KEY]
    assert (change.change, change.previous, change.previous_run) == ("regression", "expected-refusal", 2)


def test_cells_are_independent():
    other = ("k", "v", "m", "")
    result = changes([(KEY, "fail"), (other, "pass")], {KEY: [(1, "pass")], other: [(1, "pass")]})
    assert result[KEY].change == "regression" and result[other].change == "unchanged"
