"""Red-team round 115: kernels the farm had never seen.

Toy kernels whose behaviour no earlier test covered, each run through the whole farm on a loopback
SSH node (a T4 stand-in, CC 7.5): one that prints its pass marker and then its gate's refusal,
one that prints its pass marker and then dies of a signal it sends itself (SIGSEGV, SIGABRT), one
that ends its own process group with SIGTERM after its pass line, one whose stdout is all carriage-
return progress and NUL bytes, and one that reads its stdin.

The first was a wrong green: on a card it must refuse, a kernel that ran its work there (its pass
line printed) and then printed its gate's text with exit 1 was `expected-refusal`, certified as
gated. The fourth's reason said its kernel had been "sent to the background"."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodes import Fleet, query, standin_job, standin_variant
from test_verdicts import run

from orchestrator.classify import Evidence, classify
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation

MIN75 = {"min": "7.5"}
MIN80 = {"min": "8.0"}  # the T4 stand-in (7.5) is outside it: the kernel must refuse it

# A kernel of its own (not the stand-in): what it does after its pass line, chosen at compile time.
ODD = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(void) {
    printf("standin: PASS\n");
    fflush(stdout);
#if defined(SEGV_AFTER)
    raise(SIGSEGV);
#elif defined(ABORT_AFTER)
    abort();
#elif defined(TERM_GROUP)
    kill(0, SIGTERM); /* its own process group: the shell that waits on it too */
    pause();
#endif
    return 0;
}
"""


def _one_cell(make_farm, root: Path, fleet: Fleet, job: dict) -> dict[str, object]:
    config = make_farm(root, {"t4": fleet["t4"].farm_entry(root / "work")}, [job])
    run(config)
    (row,) = query(root / "results.db", "SELECT outcome, reason, stdout, stderr FROM results")
    return {"outcome": row["outcome"], "reason": row["reason"], "stdout": bytes(row["stdout"] or b"")}


# ------------------------------------------------------------------ A: a pass line, then the gate's refusal


MUST_REFUSE = Expectation(Outcome.EXPECTED_REFUSAL, "CC 7.5 is outside CC >= 8.0")
MUST_RUN = Expectation(Outcome.PASS, "CC 7.5 satisfies CC >= 7.5")


def test_a_pass_line_beside_a_refusal_is_no_refusal() -> None:
    """The verdict as a table: a refusal's text and exit 1 with the pass marker on stdout ran the
    work on the card; without the pass line it is a refusal, as before."""
    seen = {"build_exit": 0, "inspect_exit": 0, "run_exit": 1, "kernel_exit": 1, "kernel_started": True}
    ran = classify(Evidence(**seen, pass_line=1, refusal_line=1), MUST_REFUSE)
    assert ran.outcome is Outcome.MISSING_REFUSAL and ran.failed_stage == "run", ran
    assert "pass marker (stdout line 1)" in ran.reason and "CC 7.5 is outside CC >= 8.0" in ran.reason, ran.reason
    gated = classify(Evidence(**seen, refusal_line=1), MUST_REFUSE)
    assert gated.outcome is Outcome.EXPECTED_REFUSAL, gated
    # on a card it serves the cell stays red, as before
    served = classify(Evidence(**seen, pass_line=1, refusal_line=1), MUST_RUN)
    assert served.outcome is Outcome.UNEXPECTED_REFUSAL, served


def test_a_kernel_that_passes_and_then_refuses_is_a_missing_refusal(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """Its work ran on a card its contract excludes (its pass line on stdout), and only then did it
    print its gate's text and exit 1: a gate after the work refuses nothing. It was
    `expected-refusal`, green, certifying the gate."""
    prelude = tmp_path / "work-first.sh"
    prelude.write_text('echo "standin: PASS"\n')  # the kernel's own output, before its gate runs
    variant = standin_variant("PASS", MIN80, "MIN_CC=80", prelude=prelude)
    cell = _one_cell(make_farm, tmp_path / "farm", ssh_fleet, standin_job("standin", {"v": variant}))
    assert cell["outcome"] == "missing-refusal", cell
    assert "pass marker (stdout line 1)" in str(cell["reason"]), cell


# ------------------------------------------------------------------ B: a pass line, then a signal of its own


def _odd_job(flag: str) -> dict:
    variant = {
        "build": f"gcc -O1 {flag} -o {{binary}} {{sources}}",
        "inspect": "objdump -d {binary}",
        "instructions": {"call": 1},
        "cc": MIN75,
    }
    return standin_job("odd", {"v": variant}, sources=["kernels/odd.c"])


def _odd_cell(make_farm, root: Path, fleet: Fleet, flag: str) -> dict[str, object]:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "odd.c").write_text(ODD)
    return _one_cell(make_farm, root, fleet, _odd_job(flag))


@pytest.mark.parametrize(("flag", "said"), [("-DSEGV_AFTER", "SIGSEGV (exit 139)"), ("-DABORT_AFTER", "SIGABRT")])
def test_a_pass_line_then_a_signal_of_its_own_fails(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, flag: str, said: str
) -> None:
    """Its pass line flushed, then killed by a signal it raised: fail, naming the signal."""
    cell = _odd_cell(make_farm, tmp_path / "farm", ssh_fleet, flag)
    assert cell["outcome"] == "fail", cell
    assert "the pass marker was printed (stdout line 1)" in str(cell["reason"]) and said in str(cell["reason"]), cell


def test_a_kernel_that_ends_its_own_process_group_says_so(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """kill(0, SIGTERM) after its pass line ends the kernel and the shell waiting on it, so no
    status is noted: no pass, and the reason says what ended the run, not only "sent to the
    background", which this kernel never was."""
    cell = _odd_cell(make_farm, tmp_path / "farm", ssh_fleet, "-DTERM_GROUP")
    assert cell["outcome"] == "fail", cell
    assert "SIGTERM" in str(cell["reason"]), cell


# ------------------------------------------------------------------ C: output the scanner must read as printed


def test_carriage_returns_and_nul_bytes_are_read_as_printed(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A progress line of carriage returns ending in the marker is the marker's line; a marker cut
    by a NUL byte is none (a failing kernel whose last stdout line draws as `standin: PASS`)."""
    prelude = tmp_path / "progress.sh"
    prelude.write_text("printf 'standin: 10%%\\rstandin: PA\\000SS\\r\\n'\n")
    variant = standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude)
    cell = _one_cell(make_farm, tmp_path / "farm", ssh_fleet, standin_job("standin", {"v": variant}))
    assert cell["outcome"] == "fail" and "without the pass marker" in str(cell["reason"]), cell
    assert b"\rstandin: PA\x00SS\r\n" in cell["stdout"], cell  # kept as printed


def test_a_kernel_reading_stdin_reads_nothing(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A kernel that reads its stdin gets an end of file at once (not the farm's channel, where
    it would block until its timeout or read the farm's own bytes), and passes."""
    prelude = tmp_path / "reads.sh"
    prelude.write_text('if read -r line; then echo "read: $line" >&2; exit 1; fi; echo "stdin: eof" >&2\n')
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude, timeout=10)
    cell = _one_cell(make_farm, tmp_path / "farm", ssh_fleet, standin_job("standin", {"v": variant}))
    assert cell["outcome"] == "pass", cell
