"""Red-team 235: a known failure's `when:` against the cell it is meant for (orchestrator/plan.py).

A cell's expectation carries the job's declared known failure; a failure it covers is
`known-failure`, green. One that covers a cell it was not written for hides the kernel's failure
there; one that misses the cell it was written for makes the declared failure red."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_classify import built
from test_config import GOOD_FARM, make_farm
from test_config_properties import FAKE_SNAPSHOT

from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import load_farm
from orchestrator.outcomes import Outcome
from orchestrator.plan import expect

SNAPSHOT = FAKE_SNAPSHOT  # a T4 (CC 7.5) node whose nvcc is 13.0.88


def _job(known: str) -> str:
    return f"""\
kernel: k
sources: [kernels/k.cu]
pass_marker: PASS
refusal_marker: needs CC
variants:
  v1:
    build: '{{nvcc}} -o {{binary}} {{sources}}'
    cc: {{min: "7.5"}}
    known_failures:
{known}"""


def _expectation(tmp_path: Path, known: str, nvcc: str = "13.0.88"):
    farm = load_farm(make_farm(tmp_path, farm=GOOD_FARM, job=_job(known)))
    job = farm.jobs["k"]
    snapshot = dataclasses.replace(SNAPSHOT, nvcc_version=nvcc)
    return expect(job, job.spec.variants["v1"], snapshot, ComputeCapability(7, 5))


def _one(nvcc_range: str) -> str:
    return f"""\
      - when: {{nvcc: "{nvcc_range}"}}
        outcome: fail
        reason: wrong numbers (issue 7)
"""


@pytest.mark.parametrize(
    ("nvcc_range", "nvcc", "applies"),
    [
        (">13.0", "13.0.88", False),  # "after 13.0": 13.1 on; was applied to 13.0.88
        ("!=13.0", "13.0.88", False),  # "all but 13.0": was applied to 13.0.88
        ("==13.0", "13.0.88", True),  # "13.0": applied to no nvcc 13.0 but a V13.0.0
        ("<=13.0", "13.0.88", True),
        ("<=13.0", "13.1.80", False),
        (">=13.0,<13.1", "13.0.88", True),  # the README's example, unchanged
        (">=13.0,<13.1", "13.1.80", False),
        (">=13.0,<13.1", "12.9.86", False),
        ("<13.1", "13.1.0", False),
        ("==13", "13.1.80", True),  # "13": the CUDA 13 toolkits
        (">12", "12.9.86", False),
        (">=12.4.131", "12.4.99", False),  # a clause of three numbers is judged on all three, as before
        (">=12.4.131", "12.4.131", True),
        ("==13.0.*", "13.0.88", True),
        ("~=13.0", "13.2.51", True),  # PEP 440's compatible release: 13.0 and later 13.x
    ],
)
def test_an_nvcc_range_is_judged_on_the_release_it_names(
    tmp_path: Path, nvcc_range: str, nvcc: str, applies: bool
) -> None:
    """Before: nvcc's version (13.0.88) was judged in full against a range that names releases
    (13.0): `>13.0` and `!=13.0` covered 13.0.88, so a failure on the very release the declaration
    excludes was `known-failure`, green; `==13.0` and `<=13.0` never covered an nvcc 13.0 (red where
    the job declared it). Figure: each clause is judged on as many numbers as it names."""
    exp = _expectation(tmp_path, _one(nvcc_range), nvcc)
    assert (exp.known_failure is not None) is applies, (nvcc_range, nvcc, exp)
    verdict = classify(built(run_exit=1), exp)  # the wrong numbers
    assert verdict.outcome is (Outcome.KNOWN_FAILURE if applies else Outcome.FAIL), verdict


TWO = """\
      - when: {nvcc: ">=13.0,<13.1"}
        outcome: build-fail
        reason: nvcc 13.0 rejects the header (issue 3)
      - when: {cc: {exactly: "7.5"}}
        outcome: fail
        reason: wrong numbers on Turing (issue 9)
"""


def test_each_known_failure_that_covers_a_cell_is_honoured(tmp_path: Path) -> None:
    """Before: the cell took the first declaration that covers it (nvcc 13.0's build-fail), so the
    second (wrong numbers on CC 7.5), which covers it too, was never asked: a built binary's wrong
    numbers on the T4 with nvcc 13.0.88 were a red `fail` the job declares, while with nvcc 13.1 the
    same failure was `known-failure`. Figure: a failure is known if any declaration covering the
    cell names it; a pass is `fixed`, naming every declaration that covered it."""
    exp = _expectation(tmp_path, TWO)
    assert exp.known_failure is not None and exp.known_failure.outcome is Outcome.BUILD_FAIL, exp
    built_fails = classify(built(run_exit=1), exp)
    assert built_fails.outcome is Outcome.KNOWN_FAILURE, built_fails
    assert "issue 9" in built_fails.reason, built_fails
    assert classify(Evidence(build_exit=1), exp).outcome is Outcome.KNOWN_FAILURE
    passed = classify(built(run_exit=0, stdout=b"PASS"), exp)
    assert passed.outcome is Outcome.FIXED and "issue 3" in passed.reason and "issue 9" in passed.reason, passed
    # a failure no declaration names stays the kernel's
    assert classify(built(run_exit=0, stdout=b"PASS", run_timed_out=True), exp).outcome is Outcome.TIMEOUT
