"""Red-team round 204: what a kernel prints around its pass marker, as a reviewer reads the reason.

Broke (before -> after):

1. A kernel that shows its progress on one line (`\\rstep 17 of 10000`, rewritten in place, as
   progress bars do) and then overwrites it with its pass line (`\\rtoy: PASS\\n`) printed one line
   of 180 KB: a line over 64 KiB is never read for a marker (README "Markers"), so the cell was
   `fail`, "exit 0 but no pass marker on stdout (pass marker 'toy: PASS'; last stdout line: "toy:
   PASS")": the reason quoted the marker's own words as the line it was missing from, and said
   nothing of the length. Now it says how many stdout lines were too long to be read, and that a
   carriage return ends no line. The verdict stays fail (the 64 KiB rule is unchanged).
2. A kernel ending its pass line in a carriage return (`printf("toy: PASS\\r\\n")`, code ported
   from Windows) or a blank, under a marker anchored with `$` (`^toy: PASS$`): "exit 0 but no pass
   marker on stdout (pass marker '^toy: PASS$'; last stdout line: "toy: PASS")", the line quoted
   without what kept `$` from matching. Now the reason names the line that matches but for its
   end, and says to end the marker in `\\s*$`. The verdict stays fail.

Held (checked by hand, not kept): a marker split across the transport's chunks, at every chunk
size around 64 KiB and 256 bytes, with carriage returns, NULs and CUDA's words beside it, matches
as the whole stream does (3000 random streams); non-ASCII output and reasons under
`PYTHONIOENCODING=ascii LC_ALL=C` on the farm host print escaped, exit as judged.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from nodes import CARDS, nvidia_smi_script, smi_on_path
from test_faults import farm_cli
from toyfarm import toy_farm

from orchestrator.errors import EXIT_UNEXPECTED
from orchestrator.run.streams import MAX_LINE, scan_bytes


def _verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, marker: str) -> tuple[str, str]:
    """The toy farm's one cell on a stand-in T4 (its kernel built by g++), pass marker `marker`."""
    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)  # the card runs the toy
    config = toy_farm(tmp_path, source=source)
    job = tmp_path / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("pass_marker: 'toy: PASS'", f"pass_marker: '{marker}'"))
    done = farm_cli(tmp_path, "verify", "--all", "--config", str(config))
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "results.db") as db:
        return db.execute("SELECT outcome, reason FROM results").fetchone()


PROGRESS = (
    "#include <cstdio>\n"
    'int main() { for (int i = 0; i < 10000; i++) std::printf("\\rstep %5d of 10000", i);\n'
    '  std::printf("\\rtoy: PASS\\n"); return 0; }\n'
)


def test_a_pass_line_after_a_progress_line_too_long_to_read_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: fail, "(pass marker 'toy: PASS'; last stdout line: "toy: PASS")", the length unsaid.
    Figure: fail, the reason saying one stdout line was over 64 KiB and not read, and why."""
    outcome, reason = _verdict(tmp_path, monkeypatch, PROGRESS, "toy: PASS")
    assert outcome == "fail"
    assert reason == (
        "exit 0 but no pass marker on stdout (pass marker 'toy: PASS'; last stdout line: \"toy: PASS\"; "
        "1 stdout line was longer than 64 KiB, and a line that long is never read for a marker "
        "(a carriage return ends no line: a progress line rewritten with '\\r' is one line))"
    ), reason


@pytest.mark.parametrize(("end", "said"), [("\\r", "toy: PASS"), (" ", "toy: PASS")])
def test_a_pass_line_ending_in_a_carriage_return_or_blank_names_the_dollar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end: str, said: str
) -> None:
    """Before: fail, "(pass marker '^toy: PASS$'; last stdout line: "toy: PASS")". Figure: fail, the
    reason naming the line that the marker matches but for its end, and the fix."""
    source = f'#include <cstdio>\nint main() {{ std::printf("toy: PASS{end}\\nbye\\n"); return 0; }}\n'
    outcome, reason = _verdict(tmp_path, monkeypatch, source, "^toy: PASS$")
    assert outcome == "fail"
    assert reason == (
        "exit 0 but no pass marker on stdout (pass marker '^toy: PASS$'; last stdout line: \"bye\"; "
        f'stdout line 1, "{said}", matches it but for a carriage return or blanks at its end, which the '
        "marker's $ does not allow before the line's end: end it in \\s*$ to allow them)"
    ), reason


def test_the_stream_counts_the_lines_too_long_to_read_in_any_chunking() -> None:
    """Unit: a long line that arrives whole with its newline, or in pieces, counts once; an
    unterminated one at the stream's end too; lines up to MAX_LINE count not."""
    data = b"a" * (MAX_LINE + 1) + b"\nok\n" + b"b" * MAX_LINE + b"\n" + b"c" * (MAX_LINE + 5)
    assert scan_bytes(data, {"p": "PASS"}).long_lines == 2
    from orchestrator.run.streams import StreamScan

    for size in (7, 4096, MAX_LINE, MAX_LINE + 3):
        scanner = StreamScan({"p": "PASS"}, 1 << 20)
        for at in range(0, len(data), size):
            scanner.feed(data[at : at + size])
        assert scanner.finish().long_lines == 2, size


def test_only_a_closing_dollar_is_read_as_the_lines_end() -> None:
    """Unit: `PASS$` and `PASS\\\\$` (a backslash, then the end) allow blanks; `PASS\\$` (a dollar
    sign as text) and a marker with no `$` have no such reading."""
    from orchestrator.run.stages.failure_words import with_end_blanks

    assert with_end_blanks("^toy: PASS$") == r"^toy: PASS[ \t\r\f\v]+$"
    assert with_end_blanks("PASS\\\\$") == "PASS\\\\" + r"[ \t\r\f\v]+$"
    assert with_end_blanks("costs 5\\$") is None and with_end_blanks("toy: PASS") is None
