"""classify/ as a table: evidence + expectation -> outcome and failing stage."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.classify import Evidence, classify, exit_words
from orchestrator.config.job_spec import KnownFailureSpec
from orchestrator.metrics import Measured
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run.streams import scan_bytes

PASS_RE = r"PASS"
REFUSE_RE = r"needs CC 9\.0"

MUST_RUN = Expectation(Outcome.PASS, "CC 9.0 satisfies CC == 9.0")
MUST_REFUSE = Expectation(Outcome.EXPECTED_REFUSAL, "CC 7.5 is outside CC == 9.0")
NO_GPU = Expectation(Outcome.COMPILE_ONLY, "no GPU")
KF_BUILD = KnownFailureSpec.model_validate(
    {"when": {"nvcc": ">=13.0,<13.1"}, "outcome": "build-fail", "reason": "ptxas sm_90 pass"}
)
# 30 % below the median of its last 5 (tolerance 10 %); and the same with only 4 earlier values
SLOW = (Measured("gflops", "GFLOP/s", "higher", 0.1, 70.0, "read", (100.0,) * 5),)
SLOW_NO_BASELINE = (Measured("gflops", "GFLOP/s", "higher", 0.1, 70.0, "read", (100.0,) * 4),)


def observed(stdout: bytes = b"", stderr: bytes = b"", **kw) -> Evidence:
    """Evidence as the run stage gives it: markers scanned over the streams."""
    out = scan_bytes(stdout, {"pass": PASS_RE})
    err = scan_bytes(stderr, {"refusal": REFUSE_RE})
    return Evidence(
        pass_line=out.matches.get("pass"),
        refusal_line=err.matches.get("refusal"),
        stderr_last_line=err.last_line,
        **kw,
    )


def built(**kw) -> Evidence:
    base = {"build_exit": 0, "inspect_exit": 0}
    base.update(kw)
    return observed(**base)


TABLE = [
    # (name, evidence, expectation, outcome, failed stage)
    ("pass", built(run_exit=0, stdout=b"x PASS y"), MUST_RUN, Outcome.PASS, None),
    ("exit0-no-marker", built(run_exit=0, stdout=b"done"), MUST_RUN, Outcome.FAIL, "run"),
    ("numerical-fail", built(run_exit=1, stderr=b"FAIL at [3]"), MUST_RUN, Outcome.FAIL, "run"),
    ("crash", built(run_exit=139), MUST_RUN, Outcome.FAIL, "run"),
    ("marker-but-nonzero", built(run_exit=1, stdout=b"PASS"), MUST_RUN, Outcome.FAIL, "run"),
    (
        "unexpected-refusal",
        built(run_exit=1, stderr=b"X needs CC 9.0 ..."),
        MUST_RUN,
        Outcome.UNEXPECTED_REFUSAL,
        "run",
    ),
    (
        "expected-refusal",
        built(run_exit=1, stderr=b"T4 needs CC 9.0 (Hopper)"),
        MUST_REFUSE,
        Outcome.EXPECTED_REFUSAL,
        None,
    ),
    (
        "ran-where-must-refuse",
        built(run_exit=0, stdout=b"PASS"),
        MUST_REFUSE,
        Outcome.MISSING_REFUSAL,
        "run",
    ),
    (
        "crashed-where-must-refuse",
        built(run_exit=134, stderr=b"Aborted"),
        MUST_REFUSE,
        Outcome.MISSING_REFUSAL,
        "run",
    ),
    (  # found by a red-team helper: was expected-refusal ("refused with its gate's text, as it must")
        "refusal-text-then-crash-where-must-refuse",
        built(run_exit=139, stderr=b"T4 needs CC 9.0 (Hopper)"),
        MUST_REFUSE,
        Outcome.MISSING_REFUSAL,
        "run",
    ),
    (  # a crash, not a refusal of a card it serves
        "refusal-text-then-crash-where-must-run",
        built(run_exit=134, stderr=b"X needs CC 9.0 ...\nAborted"),
        MUST_RUN,
        Outcome.FAIL,
        "run",
    ),
    (  # `return -1` after the gate's text: 255 names no signal, the gate's own exit
        "refusal-exit-255-where-must-refuse",
        built(run_exit=255, stderr=b"T4 needs CC 9.0 (Hopper)"),
        MUST_REFUSE,
        Outcome.EXPECTED_REFUSAL,
        None,
    ),
    (
        "refusal-text-but-exit0",
        built(run_exit=0, stderr=b"needs CC 9.0"),
        MUST_REFUSE,
        Outcome.MISSING_REFUSAL,
        "run",
    ),
    ("build-fail", Evidence(build_exit=1), MUST_RUN, Outcome.BUILD_FAIL, "build"),
    # found by a red-team helper: a cuobjdump that is not there, a work folder mounted noexec
    ("disassembler-not-found", Evidence(build_exit=0, inspect_exit=127), MUST_RUN, Outcome.INFRA_ERROR, "inspect"),
    (
        "kernel-not-executable",
        built(run_exit=126, stderr=b"sh: 1: ./k: Permission denied"),
        MUST_RUN,
        Outcome.INFRA_ERROR,
        "run",
    ),
    (
        "run-program-not-found",
        built(run_exit=127, stderr=b"sh: 1: ./k: not found"),
        MUST_REFUSE,
        Outcome.INFRA_ERROR,
        "run",
    ),
    # its own exit 127 (127 elements wrong), and a gate's own 126 after its text: the kernel ran
    ("kernel-exit-127-is-its-own", built(run_exit=127, stderr=b"127 out of tolerance"), MUST_RUN, Outcome.FAIL, "run"),
    ("kernel-own-not-found", built(run_exit=127, stderr=b"input.bin: file not found"), MUST_RUN, Outcome.FAIL, "run"),
    (
        "gate-exit-126-is-a-refusal",
        built(run_exit=126, stderr=b"T4 needs CC 9.0 (Hopper)"),
        MUST_REFUSE,
        Outcome.EXPECTED_REFUSAL,
        None,
    ),
    ("build-wrote-no-binary", Evidence(build_exit=0, build_no_binary=True), MUST_RUN, Outcome.BUILD_FAIL, "build"),
    (
        "inspect-tool-fail",
        Evidence(build_exit=0, inspect_exit=255),
        MUST_RUN,
        Outcome.INSPECT_FAIL,
        "inspect",
    ),
    (
        "instruction-missing",
        built(missing_instructions={"HGMMA": (0, 1)}),
        MUST_RUN,
        Outcome.INSPECT_FAIL,
        "inspect",
    ),
    ("timeout", built(run_exit=124, run_timed_out=True), MUST_RUN, Outcome.TIMEOUT, "run"),
    (
        "timeout-even-if-must-refuse",
        built(run_exit=137, run_timed_out=True),
        MUST_REFUSE,
        Outcome.TIMEOUT,
        "run",
    ),
    (
        "infra-wins",
        observed(
            infra_stage="run",
            infra_detail="dropped",
            build_exit=0,
            inspect_exit=0,
            run_exit=0,
            stdout=b"PASS",
        ),
        MUST_RUN,
        Outcome.INFRA_ERROR,
        "run",
    ),
    ("compile-only", built(), NO_GPU, Outcome.COMPILE_ONLY, None),
    ("no-gpu-build-fail", Evidence(build_exit=2), NO_GPU, Outcome.BUILD_FAIL, "build"),
    (
        "known-failure",
        Evidence(build_exit=1),
        Expectation(Outcome.PASS, "r", KF_BUILD),
        Outcome.KNOWN_FAILURE,
        "build",
    ),
    (
        "known-failure-fixed",
        built(run_exit=0, stdout=b"PASS"),
        Expectation(Outcome.PASS, "r", KF_BUILD),
        Outcome.FIXED,
        None,
    ),
    (
        "known-failure-other-failure",
        built(run_exit=1),
        Expectation(Outcome.PASS, "r", KF_BUILD),
        Outcome.FAIL,
        "run",
    ),
    (
        "known-failure-no-gpu-fixed",
        built(),
        Expectation(Outcome.COMPILE_ONLY, "r", KF_BUILD),
        Outcome.FIXED,
        None,
    ),
    (
        "known-failure-infra-stays-infra",
        Evidence(infra_stage="probe"),
        Expectation(Outcome.PASS, "r", KF_BUILD),
        Outcome.INFRA_ERROR,
        "probe",
    ),
    # speed comes last, and only for a pass
    ("perf-regression", built(run_exit=0, stdout=b"PASS", metrics=SLOW), MUST_RUN, Outcome.PERF_REGRESSION, "run"),
    (
        "slow-too-few-earlier-values",
        built(run_exit=0, stdout=b"PASS", metrics=SLOW_NO_BASELINE),
        MUST_RUN,
        Outcome.PASS,
        None,
    ),
    ("slow-and-wrong-is-fail", built(run_exit=1, metrics=SLOW), MUST_RUN, Outcome.FAIL, "run"),
    (
        "slow-refusal-is-a-refusal",
        built(run_exit=1, stderr=b"T4 needs CC 9.0", metrics=SLOW),
        MUST_REFUSE,
        Outcome.EXPECTED_REFUSAL,
        None,
    ),
    (
        "slow-fixed-stays-fixed",
        built(run_exit=0, stdout=b"PASS", metrics=SLOW),
        Expectation(Outcome.PASS, "r", KF_BUILD),
        Outcome.FIXED,
        None,
    ),
    # the run's commands naming {binary} (commands.kernel_run): a command after a kernel that exited 0
    # fails the cell, but is no refusal (a false expected-refusal, found by a red-team helper)
    (
        "after-kernel-fails-no-refusal",
        built(run_exit=1, kernel_started=True, kernel_exit=0, stdout=b"PASS", stderr=b"needs CC 9.0; running anyway"),
        MUST_REFUSE,
        Outcome.MISSING_REFUSAL,
        "run",
    ),
    (
        "after-kernel-fails",
        built(run_exit=1, kernel_started=True, kernel_exit=0, stdout=b"PASS"),
        MUST_RUN,
        Outcome.FAIL,
        "run",
    ),
    (
        "kernel-refuses-then-run-goes-on",
        built(run_exit=1, kernel_started=True, kernel_exit=1, stderr=b"needs CC 9.0"),
        MUST_REFUSE,
        Outcome.EXPECTED_REFUSAL,
        None,
    ),
    ("never-started", built(run_exit=0, kernel_started=False), MUST_RUN, Outcome.FAIL, "run"),
    ("never-started-refuse", built(run_exit=1, kernel_started=False), MUST_REFUSE, Outcome.MISSING_REFUSAL, "run"),
    (
        "never-started-no-program",
        built(run_exit=127, kernel_started=False, other_last_line="sh: 1: numactl: not found"),
        MUST_RUN,
        Outcome.INFRA_ERROR,
        "run",
    ),
    # a third red-team round: bash as the node's sh names a program missing inside the farm's
    # function "environment: line 1:" (it read as the kernel's fail), and a run's own `timeout`
    # killing a hung kernel that had printed its gate's text read as a clean refusal
    (
        "bash-no-launcher",
        built(
            run_exit=127,
            kernel_started=False,
            kernel_cannot_start=True,
            stderr=b"environment: line 1: nsys: command not found",
        ),
        MUST_RUN,
        Outcome.INFRA_ERROR,
        "run",
    ),
    # a kernel that printed the shell's words and exited 127 is judged on its exit (a red-team finding:
    # it read as the node's trouble); the farm's own look tells a missing launcher (above)
    (
        "kernel-prints-shell-words",
        built(run_exit=127, kernel_started=True, kernel_exit=127, stderr=b"sh: 1: nvidia-cuda-mps-control: not found"),
        MUST_RUN,
        Outcome.FAIL,
        "run",
    ),
    # the run removed the cell's copy after a first call: the farm checked it just before the run
    (
        "copy-gone-on-the-second-call",
        built(run_exit=127, kernel_started=True, kernel_exit=0, kernel_copy_gone=True),
        MUST_RUN,
        Outcome.FAIL,
        "run",
    ),
    # the farm's function found a kernel command's program missing (commands.CANNOT_START_NOTE),
    # whatever the shell said of it in the node's language
    (
        "launcher-not-there",
        built(
            run_exit=127, kernel_started=False, kernel_cannot_start=True, other_last_line="nsys: Befehl nicht gefunden"
        ),
        MUST_REFUSE,
        Outcome.INFRA_ERROR,
        "run",
    ),
    (
        "a-kernel-failed-before-a-launcher-was-missing",
        built(run_exit=1, kernel_started=True, kernel_exit=1, kernel_cannot_start=True, stderr=b"FAIL at [3]"),
        MUST_RUN,
        Outcome.FAIL,
        "run",
    ),
    (
        "launcher-timeout-no-refusal",
        built(run_exit=124, kernel_started=True, kernel_exit=124, launcher_timed_out=True, stderr=b"needs CC 9.0"),
        MUST_REFUSE,
        Outcome.TIMEOUT,
        "run",
    ),
    (
        "launcher-timeout-no-unexpected-refusal",
        built(run_exit=124, kernel_started=True, kernel_exit=124, launcher_timed_out=True, stderr=b"needs CC 9.0"),
        MUST_RUN,
        Outcome.TIMEOUT,
        "run",
    ),
]


@pytest.mark.parametrize(("name", "evidence", "expectation", "outcome", "stage"), TABLE, ids=[row[0] for row in TABLE])
def test_classify_table(name, evidence, expectation, outcome, stage):
    verdict = classify(evidence, expectation)
    assert verdict.outcome is outcome, verdict.reason
    assert verdict.failed_stage == stage
    assert verdict.reason


def test_undecodable_output_is_still_classified():
    ev = built(run_exit=0, stdout=b"\xff\xfe PASS \xc3")
    assert classify(ev, MUST_RUN).outcome is Outcome.PASS


def test_reasons_name_the_signal_the_marker_and_the_kernels_last_words():
    """Issue 9, case 7: a reason a reviewer can act on."""
    segv = classify(built(run_exit=139, stderr=b"an illegal memory access was encountered\n\n"), MUST_RUN)
    assert segv.outcome is Outcome.FAIL
    assert "killed by SIGSEGV (exit 139)" in segv.reason
    assert 'last stderr line: "an illegal memory access was encountered"' in segv.reason
    late = classify(built(run_exit=3, stdout=b"x\ny PASS\n", stderr=b"racySum: FAIL, got 9, want 1048576\n"), MUST_RUN)
    assert late.outcome is Outcome.FAIL
    assert "the pass marker was printed (stdout line 2), but exit 3" in late.reason
    assert "racySum: FAIL, got 9, want 1048576" in late.reason
    assert exit_words(134) == "killed by SIGABRT (exit 134)"
    assert exit_words(3) == "exit 3"


def test_a_marker_is_matched_line_by_line_over_the_whole_stream():
    """Issue 9, case 1 (the matching part): a marker after megabytes of output counts."""
    noise = b"debug: " + b"x" * 120 + b"\n"
    stdout = noise * 20000 + b"final: PASS\n"  # 2.5 MB, the marker on the last line
    scanned = scan_bytes(stdout, {"pass": PASS_RE}, cap=1 << 20)
    assert scanned.matches == {"pass": 20001}
    assert scanned.size == len(stdout) and scanned.cut is not None
    assert scanned.kept.endswith(b"final: PASS\n") and len(scanned.kept) < (1 << 20) + 200


def test_a_backtracking_marker_cannot_hang_on_hostile_output():
    """Issue 9, case 8: RE2 is linear; Python's re would take ages here."""
    import time

    clock = time.monotonic()
    scanned = scan_bytes(b"a" * 200_000 + b"!\n", {"pass": "(a+)+$"})
    assert time.monotonic() - clock < 5
    assert scanned.matches == {}


@pytest.mark.parametrize("chunk", [70_000, 4096, 1 << 20])
def test_a_line_too_long_to_be_a_marker_never_matches_however_it_arrives(chunk):
    """Matching a 100,000-byte line in 64 KiB pieces once let `$` match where a
    piece was cut: '(a+)+$' matched "aaaa...a!". A line over 64 KiB is never a marker."""
    from orchestrator.run.streams import scan

    data = b"a" * 100_000 + b"!\n" + b"standin: PASS\n"
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    found = scan(pieces, {"bad": "(a+)+$", "pass": "standin: PASS"}, 1 << 20)
    assert found.matches == {"pass": 2} and found.lines == 2


def test_a_known_failure_applies_only_where_its_outcome_can_happen() -> None:
    """Found by a red-team helper: a run-stage failure declared by nvcc range applied on a
    node without a GPU, and on a card the gate must refuse; the cell behaved as it must
    there whatever the kernel does now, and was `fixed` ("remove the declaration")."""
    from orchestrator.config.capability import ComputeCapability
    from orchestrator.config.job_spec import VariantSpec
    from orchestrator.plan import expect
    from orchestrator.run.snapshot import NodeSnapshot

    variant = VariantSpec.model_validate(
        {
            "build": "nvcc -o {binary} {sources}",
            "cc": {"exactly": "9.0"},
            "known_failures": [
                {"when": {"nvcc": ">=13.0"}, "outcome": "fail", "reason": "wrong numbers with nvcc 13"},
                {"when": {"nvcc": ">=13.0"}, "outcome": "missing-refusal", "reason": "its gate lets 7.5 in"},
            ],
        }
    )
    node = NodeSnapshot("n", "/w", "h", "Linux", None, None, None, None, 0, "nvcc", "13.0.88", "", None, None)
    job = SimpleNamespace(spec=SimpleNamespace(cuda_error_text="strict"))  # all expect reads of the job
    no_gpu = expect(job, variant, node, None)  # type: ignore[arg-type]
    assert (no_gpu.outcome, no_gpu.known_failure) == (Outcome.COMPILE_ONLY, None)
    assert classify(built(), no_gpu).outcome is Outcome.COMPILE_ONLY
    hopper = expect(job, variant, node, ComputeCapability(9, 0))  # type: ignore[arg-type]
    assert hopper.known_failure is not None and hopper.known_failure.outcome is Outcome.FAIL
    turing = expect(job, variant, node, ComputeCapability(7, 5))  # type: ignore[arg-type]
    assert turing.known_failure is not None and turing.known_failure.outcome is Outcome.MISSING_REFUSAL
    refused = built(run_exit=1, stderr=b"T4 needs CC 9.0 (Hopper)")
    assert classify(refused, turing).outcome is Outcome.FIXED  # its gate now refuses: truly fixed
    only_fail = variant.model_copy(update={"known_failures": variant.known_failures[:1]})
    turing = expect(job, only_fail, node, ComputeCapability(7, 5))  # type: ignore[arg-type]
    assert turing.known_failure is None
    assert classify(refused, turing).outcome is Outcome.EXPECTED_REFUSAL


@pytest.mark.parametrize("declared", ["infra-error", "compile-only", "expected-refusal", "pass", "not-run"])
def test_only_a_kernels_own_failure_can_be_declared(declared: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="a failure of the kernel's own"):
        KnownFailureSpec.model_validate({"when": {"nvcc": ">=13.0"}, "outcome": declared, "reason": "r"})


def test_a_failed_jit_compile_excuses_missing_sass_names_only() -> None:
    """The node's nvcc could not compile the PTX a card JITs (a card newer than it): the SASS names
    it would have counted are not the kernel's to miss (infra-error), but a PTX name is counted in the
    PTX itself, and missing it stays the kernel's inspect-fail (a red-team note: any was excused)."""
    jit = "nvcc -cubin -arch=sm_125 k.1.sm_80.ptx: nvcc fatal : Unsupported gpu architecture 'sm_125'"
    sass = classify(built(jit_failed=jit, missing_instructions={"HMMA": (0, 1)}), MUST_RUN)
    assert sass.outcome is Outcome.INFRA_ERROR and "sm_125" in sass.reason, sass
    ptx = classify(built(jit_failed=jit, missing_instructions={"mma.sync": (0, 1)}), MUST_RUN)
    assert ptx.outcome is Outcome.INSPECT_FAIL, ptx
