"""Red-team round 120: kernel output the farm had never met.

Each run through the whole farm on a loopback SSH node (a T4 stand-in, CC 7.5), the stand-in kernel
printing its pass line and exiting 0 after a prelude of its own. What broke (both wrong greens):

1. CUDA's error words on a line longer than 64 KiB: a course kernel's error check that prints
   `CUDA error: %s` without a newline, then its result array on the same line. Lines that long are
   never taken for a marker, so the CUDA-error rule (round 92) never saw the words: `pass`,
   certified on CC 7.5, for a launch that never ran. Now `fail` quoting the words: CUDA's words are
   searched in over-long lines too (in overlapping pieces; a marker still never counts there).
2. CUDA's words for a card the kernel never got ("no CUDA-capable device is detected", "all
   CUDA-capable devices are busy or unavailable", "CUDA driver version is insufficient for CUDA
   runtime version", `cudaErrorNoDevice`): a kernel whose unchecked error path (or CPU fallback)
   then printed its pass line was `pass`, though no GPU code of it ran. Now such a run is asked
   after as any run with CUDA's error words: `fail`, or infra-error where the node's look finds the
   card held, in MIG mode or its driver too old (the node's, not the kernel's).

4. The reason of such a fail quoted a matched line's last carriage-return part: CUDA's words
   before a `\r` and the pass line drew as `printed CUDA's error (... "standin: PASS")`. It quotes
   the part holding the match now.

Held (kept as guards): a pass marker inside a line longer than 64 KiB is still no pass, and a
refusal's stderr carrying those words is still a clean refusal on a card the kernel must refuse.

Decided, not changed (section 3 below): a kernel or build that ran unconfined (the shell runner, a
node kernel without Landlock: RHEL 8's 4.18, say) and failed after filling the node's $TMPDIR stays
infra-error, "the node ran out of room during the cell". The helper's round made it the kernel's
`fail`/`build-fail`; it was reverted in review: the look after the stage cannot tell a kernel's
files from another tenant's full /tmp or a sibling cell's, and on a shared node whose /tmp fills,
every kernel there would have gone red, exit 1, blamed on its author. Infra-error is "no verdict"
(never green, exit 4), and its reason says what the look found. Confined, the kernel cannot write
there, and its failure is its own (round 49).
"""

from __future__ import annotations

from pathlib import Path

import test_redteam49
from nodes import Fleet, query, standin_job, standin_variant
from test_verdicts import run

from orchestrator.classify import Evidence, classify
from orchestrator.classify.cuda_errors import MARKER, cuda_error_pattern
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run.streams import MAX_LINE, scan, scan_bytes

small_tmp = test_redteam49.small_tmp  # a tmpfs of 1500 inodes as the node's $TMPDIR (a fixture)
MIN75 = {"min": "7.5"}
MIN80 = {"min": "8.0"}  # the T4 stand-in (7.5) is outside it: the kernel must refuse it
MARKERS = {"pass": "standin: PASS", MARKER: cuda_error_pattern()}
ANYWHERE = frozenset({MARKER})  # as the run stage scans: CUDA's words on a line of any length
LONG = b"CUDA error: an illegal memory access was encountered; out: " + b"0.000000 " * (MAX_LINE // 8)


def _one_cell(make_farm, root: Path, fleet: Fleet, job: dict) -> dict[str, object]:
    config = make_farm(root, {"t4": fleet["t4"].farm_entry(root / "work")}, [job])
    run(config)
    (row,) = query(root / "results.db", "SELECT outcome, reason FROM results")
    return {"outcome": row["outcome"], "reason": row["reason"]}


def _prelude_cell(make_farm, tmp_path: Path, fleet: Fleet, script: str, contract: dict, mode: str = "PASS") -> dict:
    prelude = tmp_path / "prelude.sh"
    prelude.write_text(script)
    gate = "MIN_CC=80" if contract is MIN80 else "MIN_CC=75"
    variant = standin_variant(mode, contract, gate, prelude=prelude)
    return _one_cell(make_farm, tmp_path / "farm", fleet, standin_job("standin", {"v": variant}))


# ------------------------------------------------------------------ 1: CUDA's words on an over-long line


def test_cuda_words_on_an_over_long_line_are_read() -> None:
    """In one piece, in chunks that cut the words, and with its newline in a later chunk: the
    words are found on the long line's number; the pass marker on it still never counts."""
    data = b"start\n" + LONG + b" standin: PASS\n" + b"standin: PASS\n"
    whole = scan_bytes(data, MARKERS, anywhere=ANYWHERE)
    assert whole.matches == {MARKER: 2, "pass": 3}, whole.matches
    assert "an illegal memory access was encountered" in whole.texts[MARKER], whole.texts
    for size in (7, 4096, 70_000):
        pieces = scan((data[i : i + size] for i in range(0, len(data), size)), MARKERS, 1 << 20, ANYWHERE)
        assert pieces.matches == {MARKER: 2, "pass": 3}, (size, pieces.matches)
    words = b"x" * (MAX_LINE + 10) + b" CUDA_ERROR_ILLEGAL_ADDRESS"  # cut across the chunk after the skip began
    late = scan([words[: MAX_LINE + 20], words[MAX_LINE + 20 :], b"\n"], MARKERS, 1 << 20, ANYWHERE)
    assert late.matches == {MARKER: 1}, late.matches
    no_newline = scan_bytes(b"ok\n" + LONG, MARKERS, anywhere=ANYWHERE)  # the stream's last line, never ended
    assert no_newline.matches == {MARKER: 2}, no_newline.matches
    assert scan_bytes(b"x" * (MAX_LINE + 5) + b" standin: PASS\n", MARKERS, anywhere=ANYWHERE).matches == {}


def test_a_pass_after_cuda_words_on_an_over_long_line_fails(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """Before: `pass` (exit 0, the pass marker on stdout line 2), certified on CC 7.5."""
    script = (
        "printf 'CUDA error: an illegal memory access was encountered; out:'\n"
        "head -c 70000 /dev/zero | tr '\\000' '0'\n"
        "printf '\\n'\n"
    )
    cell = _prelude_cell(make_farm, tmp_path, ssh_fleet, script, MIN75)
    assert cell["outcome"] == "fail", cell
    assert "an illegal memory access was encountered" in str(cell["reason"]), cell


# ------------------------------------------------------------------ 2: CUDA's words for a card never had


def test_cuda_words_for_no_device_are_cuda_errors() -> None:
    """The runtime's strings and names, and the driver's, for a CUDA program that got no card."""
    marker = {MARKER: cuda_error_pattern()}
    for line in (
        b"cudaMalloc failed: no CUDA-capable device is detected",
        b"CUDA error: all CUDA-capable devices are busy or unavailable",
        b"CUDA error: CUDA-capable device(s) is/are busy or unavailable",
        b"CUDA driver version is insufficient for CUDA runtime version",
        b"error 100 (cudaErrorNoDevice)",
        b"cudaErrorDevicesUnavailable",
        b"cudaErrorInsufficientDriver",
        b"cuInit: CUDA_ERROR_NO_DEVICE",
        b"CUDA error: CUDA driver is a stub library",
        b"forward compatibility was attempted on non supported HW",
        b"cudaErrorSystemDriverMismatch: system has unsupported display driver / cuda driver combination",
        b"CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    ):
        assert scan_bytes(line + b"\n", marker).matches == {MARKER: 1}, line
    assert scan_bytes(b"device 0: no errors detected\n", marker).matches == {}  # words of a healthy run
    # a progress line's carriage return: the reason quotes the words matched, not the line's last part
    drawn = scan_bytes(b"step 3\rCUDA error: no CUDA-capable device is detected\rstandin: PASS\n", marker)
    assert drawn.texts[MARKER] == "CUDA error: no CUDA-capable device is detected", drawn.texts
    seen = Evidence(build_exit=0, inspect_exit=0, run_exit=0, kernel_exit=0, kernel_started=True, pass_line=2)
    seen.cuda_error = 'stderr line 1: "cudaMalloc failed: no CUDA-capable device is detected"'
    verdict = classify(seen, Expectation(Outcome.PASS, "CC 7.5 satisfies CC >= 7.5"))
    assert verdict.outcome is Outcome.FAIL and "no CUDA-capable device" in verdict.reason, verdict


def test_a_pass_after_no_device_fails(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """Before: `pass`, certified on CC 7.5, for a kernel that said it had no GPU and then passed."""
    script = "echo 'cudaMalloc: no CUDA-capable device is detected' >&2\n"
    cell = _prelude_cell(make_farm, tmp_path, ssh_fleet, script, MIN75)
    assert cell["outcome"] == "fail", cell
    assert "no CUDA-capable device is detected" in str(cell["reason"]), cell


def test_a_refusal_beside_no_device_words_is_still_a_refusal(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """Held: the rule reads passes only; a gate's refusal with such words on stderr stays as it was."""
    script = "echo 'cudaSetDevice: all CUDA-capable devices are busy or unavailable' >&2\n"
    cell = _prelude_cell(make_farm, tmp_path, ssh_fleet, script, MIN80)
    assert cell["outcome"] == "expected-refusal", cell


# ------------------------------------------------------------------ 3: an unconfined kernel that fills the node's room


def test_a_kernel_that_fills_the_nodes_tmp_unconfined_is_no_verdict(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, small_tmp: Path, runner: str
) -> None:
    """A kernel that fails its numbers after filling the node's temporary folder (out of inodes):
    confined (the python runners) it cannot write there, and its `fail` is its own; unconfined (the
    shell runner) the look after it finds the node short of room, which it cannot tell from another
    tenant's doing: infra-error, saying so (the decision in this module's docstring)."""
    fill = f"cd {small_tmp} && seq 1 600 | sed s/^/rt120-/ | xargs touch; cd - >/dev/null; {{binary}}"
    variant = standin_variant("FAILNUM", MIN75, "MIN_CC=75", run=fill)
    root = tmp_path / "farm"
    nodes = {"t4": ssh_fleet["t4"].farm_entry(root / "work", env={"TMPDIR": str(small_tmp)})}
    config = make_farm(root, nodes, [standin_job("standin", {"fills": variant})])
    run(config)
    (row,) = query(root / "results.db", "SELECT outcome, reason FROM results")
    if runner == "shell":
        assert row["outcome"] == "infra-error", (row["outcome"], row["reason"])
        assert "ran out of room during the cell" in row["reason"], row["reason"]
    else:
        assert row["outcome"] == "fail", (row["outcome"], row["reason"])
