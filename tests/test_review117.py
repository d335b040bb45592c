"""Review round 117: two gaps round 105's masking of node secrets left.

A secret value holding a newline (a license file, a PEM key in `secret_env:`) was masked as one
`***`: the stored stdout was lines shorter than what the kernel printed, so the line a reason cites
("the pass marker on stdout (line 9)") was another line in the copy a reviewer reads, and a reason
quoting one line of the value (the last stderr line) showed that line, since only the whole value
was matched. Each line's piece of such a value is masked now, its newlines kept.

The note saying how many values were masked counted only the kept copy of a cut stream, and said
so nowhere: the cut middle is never stored (nothing in it can leak), and nothing reads it after
the markers, so the note now says the count is of what is kept and that the cut bytes were not."""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from farm_cli import farm
from nodes import Fleet, query, standin_job, standin_variant
from test_redteam99 import everything_written
from test_verdicts import run


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}


# ------------------------------------------------------------------ 1: a multi-line secret keeps line numbers


def test_a_multiline_value_is_masked_line_by_line() -> None:
    """Each line's piece of the value is ***, every newline kept; a piece alone (a reason quoting
    one line) is masked too where it is long enough to mask, and a short one only inside the value."""
    from orchestrator.output_secrets import Masker

    value = "first-line-secret\nok\nthird-line-secret\n"
    masker = Masker([value])
    printed = b"before\n" + value.encode() + b"after\n"
    assert masker.data(printed) == b"before\n***\n***\n***\nafter\n"
    assert masker.count == 1  # one occurrence of the value, however many lines it spans
    assert masker.text("login failed: third-line-secret") == "login failed: ***"
    assert masker.text("ok then") == "ok then"  # too short alone: would mangle ordinary output
    assert masker.text("a\r\nfirst-line-secret\r\nok") == "a\r\n***\r\nok"


def test_a_multiline_value_cut_at_the_kept_copys_edge_keeps_its_newlines() -> None:
    """A value the cut went through: each side's piece is masked line by line too, so the head's
    lines stay at their numbers."""
    from orchestrator.output_secrets import Masker
    from orchestrator.run.streams import scan_bytes

    value = "alpha-secret-one\nbeta-secret-two\ngamma-secret-3"
    stream = b"a\n" * 40 + value.encode() + b"\n" + b"b" * 300 + b"\n" + value.encode() + b"\n" + b"c\n" * 30
    got = scan_bytes(stream, {}, cap=200)
    kept = Masker([value]).kept(got.kept, got.cut, got.size)
    assert got.cut is not None
    head = kept.split(b"\n[farm:")[0]
    assert head.endswith(b"a\n***\n***"), head  # the value's first line and a piece of its second
    assert head.count(b"\n") == stream[: got.cut[0]].count(b"\n"), (head, stream[: got.cut[0]])
    for piece in value.split("\n"):
        assert piece[:4].encode() not in kept and piece[-4:].encode() not in kept, kept


def test_the_cited_pass_line_is_that_line_in_the_stored_stdout(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A kernel prints a three-line secret before its pass marker: the reason's line, the cell
    page's and `farm show`'s all point at the marker's line in the stdout stored and shown, and
    no line of the secret is kept anywhere (the last stderr line is its last line)."""
    lines = ["lic-" + secrets.token_hex(8), "sig-" + secrets.token_hex(8), "end-" + secrets.token_hex(8)]
    value = "\n".join(lines)
    prelude = tmp_path / "show.sh"
    prelude.write_text('echo start; printf "%s\\n" "$VENDOR_LICENSE"; echo "refused: $VENDOR_LICENSE" >&2\n')
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env={"VENDOR_LICENSE": value}, secret_env=["VENDOR_LICENSE"])
    config = make_farm(tmp_path, {"t4": node}, [standin_job("standin", {"v": variant})])
    _, summary = run(config)
    assert summary.outcomes == {"pass": 1}, summary.outcomes
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results")
    stdout = bytes(row["stdout"]).decode()
    assert stdout.startswith("start\n***\n***\n***\n"), stdout
    cited = int(re.search(r"pass marker on stdout \(line (\d+)\)", row["reason"]).group(1))
    assert cited == json.loads(row["markers"])["pass"], (cited, row["markers"])
    assert "standin: PASS" in stdout.split("\n")[cited - 1], (cited, stdout)
    assert bytes(row["stderr"]).decode().startswith("refused: ***\n***\n***\n"), bytes(row["stderr"])
    assert lines[2] not in (row["last_stderr_line"] or "") and "***" in row["last_stderr_line"], row["last_stderr_line"]

    site = tmp_path / "site"
    done = farm("report", "--run", "1", "--out", str(site), "--config", str(config), env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    page = (site / "cells" / "1.html").read_text()
    shown = page[page.index('<pre id="stdout">') + len('<pre id="stdout">') :].split("</pre>")[0]
    assert "standin: PASS" in shown.split("\n")[cited - 1], (cited, shown)
    assert f"stdout line {cited}" in page, page
    show = farm("show", "1", "--config", str(config), env=_env())
    assert show.returncode == 0, show.stdout + show.stderr
    quoted = show.stdout.split("--- stdout")[1].split("\n")[1:]  # each line behind "  | "
    assert "standin: PASS" in quoted[cited - 1], (cited, show.stdout)
    written = b"\n".join([everything_written(site), (tmp_path / "results.db").read_bytes(), show.stdout.encode()])
    for piece in lines:
        assert piece.encode() not in written, piece


# ------------------------------------------------------------------ 2: the count, where a stream was cut


def test_the_masked_note_says_it_counts_the_kept_copy_where_a_stream_was_cut() -> None:
    from orchestrator.output_secrets import masked_note

    whole = masked_note(3, {})
    assert whole["count"] == 3 and "cut" not in whole["detail"], whole
    cut = masked_note(3, {"stdout": [512, 9000]})
    assert cut["count"] == 3, cut
    assert "in the output kept" in cut["detail"], cut
    assert "stdout's bytes 512 to 9000" in cut["detail"] and "not stored" in cut["detail"], cut
    assert "not counted" in cut["detail"], cut


def test_a_cut_streams_note_counts_what_is_kept_and_says_the_middle_is_not(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A kernel prints its token in the head, 50 times in the middle the cap cuts, and in the tail:
    the count is the kept copy's (2), and the note, the cell page and the JSON say the cut middle
    was neither stored nor counted."""
    token = "tok-" + secrets.token_hex(10)
    prelude = tmp_path / "show.sh"
    prelude.write_text(
        'echo "head $VENDOR_TOKEN"; i=0; while [ $i -lt 50 ]; do echo "mid $VENDOR_TOKEN'
        ' ................................................................"; i=$((i+1)); done;'
        ' i=0; while [ $i -lt 20 ]; do echo "padding padding padding"; i=$((i+1)); done\n'
        'echo "tail $VENDOR_TOKEN" >&2\n'
    )
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env={"VENDOR_TOKEN": token})
    config = make_farm(tmp_path, {"t4": node}, [standin_job("standin", {"v": variant})], output_cap=1024)
    _, summary = run(config)
    assert summary.outcomes == {"pass": 1}, summary.outcomes
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results")
    cuts = json.loads(row["output_cuts"])
    assert "stdout" in cuts and "stderr" not in cuts, cuts
    stdout = bytes(row["stdout"])
    kept = stdout.count(b"***") + bytes(row["stderr"]).count(b"***")
    masked = json.loads(row["stage_details"])["masked"]
    assert masked["count"] == kept < 52, (masked, kept)
    start, end = cuts["stdout"]
    assert f"stdout's bytes {start} to {end}" in masked["detail"] and "not counted" in masked["detail"], masked
    site = tmp_path / "site"
    done = farm("report", "--run", "1", "--out", str(site), "--config", str(config), env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    page = (site / "cells" / "1.html").read_text()
    assert f"stdout&#x27;s bytes {start} to {end}" in page or f"stdout's bytes {start} to {end}" in page, page
    as_json = farm("report", "--format", "json", "--config", str(config), env=_env())
    assert as_json.returncode == 0, as_json.stderr
    assert f'"output_masked": {kept}' in as_json.stdout, as_json.stdout
