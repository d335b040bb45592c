"""Red-team round 232: the sanitize stage (compute-sanitizer's tools over a kernel that passed).

Broke (before/after):
1. The real tool, past the farm's `--print-limit 20`, ends its log with a second summary line,
   "ERROR SUMMARY: N errors were not printed. Use --print-limit option ...", after its count. The
   farm took the count's line for one that lines followed (a kernel's forgery), so a kernel with 257
   out-of-bounds writes read "memcheck: 1 error" and the cell page told the reviewer that the
   tool's own summary was "not the tool's word". Now that line, right after the count, is the tool's.
"""

from __future__ import annotations

from orchestrator.classify.sanitizer_report import SanitizerReport
from orchestrator.run import sanitize

# compute-sanitizer 2025.x's words for more errors than --print-limit prints (the count, then the rest)
FINDING = """========= Invalid __global__ write of size 4 bytes
=========     at fill(int *, int)+0x70 in /tmp/oob.cu:9
=========     by thread (232,0,0) in block (3,0,0)
=========     Access at 0x7f3c00000fa0 is out of bounds
=========
"""
OVER_THE_LIMIT = (
    "========= COMPUTE-SANITIZER\n"
    + FINDING * sanitize.PRINT_LIMIT
    + "========= ERROR SUMMARY: 257 errors\n"
    + f"========= ERROR SUMMARY: {257 - sanitize.PRINT_LIMIT} errors were not printed. "
    "Use --print-limit option to adjust the number of printed errors\n"
)


def test_the_tools_not_printed_line_is_its_own_and_its_count_stands() -> None:
    """Before: errors 1 and "[farm: lines follow its summary line: not the tool's word]" on the cell.
    Figure: 257 errors, as the tool counted them, and no word of a forgery."""
    got = sanitize.report("memcheck", sanitize.SANITIZER_EXIT, False, OVER_THE_LIMIT.encode())
    assert isinstance(got, SanitizerReport) and got.finished and not got.clean
    assert got.errors == 257
    assert "not the tool's word" not in got.findings
    assert got.findings.startswith("Invalid __global__ write of size 4 bytes")


def test_a_not_printed_line_alone_or_after_other_lines_is_no_summary() -> None:
    """The second line counts only right after the tool's count: alone, or after a finding, it is no
    summary (a kernel's lines, or a log cut short), and the exit code alone says errors were found.
    Figure: errors 1 (the exit code's word) and the forgery note, as before."""
    rest = OVER_THE_LIMIT.splitlines()[-1] + "\n"
    for log in ("========= COMPUTE-SANITIZER\n" + FINDING + rest, rest):
        got = sanitize.report("memcheck", sanitize.SANITIZER_EXIT, False, log.encode())
        assert isinstance(got, SanitizerReport) and got.errors == 1 and not got.clean
    # a clean count followed by a "not printed" line claiming more than it: not the tool's
    odd = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n" + rest
    got = sanitize.report("memcheck", 0, False, odd.encode())
    assert isinstance(got, SanitizerReport) and not got.clean
