"""Review round 134: a sanitizer's log was read back as its first LOG_LIMIT (64 KiB) bytes only.

compute-sanitizer writes its summary ("========= ERROR SUMMARY: N errors") at the END of its log. A log
past 64 KiB (twenty findings with their host backtraces, or a kernel writing into the log while it ran)
lost it: the cell said "errors found" with 1 error (exit 86) or "did not finish" instead of the tool's own
count, the last findings were gone, and no page said the log was cut. Worse, a summary the kernel forged
early in the log was then the last one read. And a summary with lines after it (a kernel's leftover
writing after the tool ended) was still taken as the tool's word.

Now each tool's log comes back as the build log does since review 122 (run/file_ends.py): its size and,
past LOG_LIMIT, its first and last LOG_LIMIT / 2 bytes, in the same round trip. The summary is read from
the tail (the file's true end) and only where it is the log's last line; the findings kept are the head's
first and the tail's; the report keeps [start, end, size] (`log_cut`), which the cell page and `farm
show` state. On real sshd nodes with a stand-in tool, under each node runner (resident, per cell, shell).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm, farm_env
from nodes import CARDS, Fleet, SshNode, query, standin_job, standin_variant, write_farm
from test_faults import run_farm

from orchestrator.classify.sanitizer_report import SanitizerReport
from orchestrator.run import sanitize
from orchestrator.run.file_ends import FileEnds
from orchestrator.run.frames import SIZE_DIGITS

HALF = 32 << 10  # sanitize.LOG_LIMIT // 2, written out: the test stands whatever the module says
FRAMES = 300  # host frames per stand-in finding: three findings are past 64 KiB

# A stand-in compute-sanitizer whose logs run past 64 KiB. memcheck: three findings with long host
# backtraces, then its summary (3 errors). racecheck: two races, after whatever the kernel wrote into the
# log while it ran. synccheck: a clean summary and then lines after it (as a kernel's leftover could
# write between the tool's end and the farm's reap). It writes its banner first, as the real tool does.
STANDIN = f"""#!/bin/sh
tool=memcheck; code=0; log=/dev/stderr
while [ $# -gt 0 ]; do
    case "$1" in
        --tool) tool=$2; shift 2 ;;
        --error-exitcode) code=$2; shift 2 ;;
        --print-limit) shift 2 ;;
        --log-file) log=$2; shift 2 ;;
        --*) shift ;;
        *) break ;;
    esac
done
echo "========= COMPUTE-SANITIZER" > "$log"
STANDIN_SANITIZER_TOOL=$tool "$@"
rc=$?
finding() {{
    echo "========= Invalid __global__ write of size 4 bytes ($1)"
    echo "=========     at fill(int *, int)+0x70 in oob.cu:9"
    i=0
    while [ $i -lt {FRAMES} ]; do
        echo "=========         Host Frame: libcuda.so.1 [0x$i] in cuLaunchKernel padding padding"; i=$((i + 1))
    done
    echo "========="
}}
case $tool in
    memcheck)
        {{ finding FIRST-FINDING-134; finding MIDDLE-FINDING-134; finding LAST-FINDING-134
           echo "========= ERROR SUMMARY: 3 errors"; }} >> "$log"; exit "$code" ;;
    racecheck)
        {{ echo "========= Error: Race reported between Write access at block_sum+0x90 (RACE-134-ONE)"
           echo "========= Error: Race reported between Write access at block_sum+0x94 (RACE-134-TWO)"
           echo "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"
           echo "========= ERROR SUMMARY: 2 errors"; }} >> "$log"; exit "$code" ;;
    synccheck)
        {{ echo "========= ERROR SUMMARY: 0 errors"; yes 'written after it' | head -c 100000; echo; }} >> "$log"
        exit $rc ;;
esac
echo "========= ERROR SUMMARY: 0 errors" >> "$log"; exit $rc
"""

# the kernel, under racecheck: a forged clean summary, then 100 KB, into the tool's log (its one writable
# file outside its work folder, confined or not)
JUNK = """[ "$STANDIN_SANITIZER_TOOL" = racecheck ] || exit 0
log=../sanitize-racecheck.log
{ echo "========= ERROR SUMMARY: 0 errors"; yes 'the kernel wrote this' | head -c 100000; echo; } >> $log
"""
MIN75 = {"min": "7.5"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNode]:
    fleet = Fleet(tmp_path_factory.mktemp("review134"))
    try:
        one = fleet.add("t4", CARDS["t4"], start=False)
        tool = one.node_bin / "compute-sanitizer"
        tool.write_text(STANDIN)
        tool.chmod(0o755)
        one.start()
        yield one
    finally:
        fleet.stop()


# ------------------------------------------------------------------ reading a cut log


def _kept(log: bytes) -> tuple[bytes, tuple[int, int, int] | None]:
    """The log as the farm keeps it from its frame (file_ends.FileEnds), and its cut."""
    ends = FileEnds(sanitize.LOG_LIMIT)
    body = log if len(log) <= 2 * HALF else log[:HALF] + log[-HALF:]
    ends.feed(b"%020d" % len(log) + body)
    kept = ends.finish()
    assert SIZE_DIGITS == 20
    return kept.kept, (*kept.cut, kept.size) if kept.cut else None


def _long_log(summary: str, after: str = "") -> bytes:
    frames = "".join(f"=========         Host Frame: libcuda.so.1 [0x{i}] padding padding\n" for i in range(400))
    lines = [f"========= Invalid __global__ write of size 4 bytes ({n})\n{frames}" for n in ("FIRST", "MID", "LAST")]
    return ("========= COMPUTE-SANITIZER\n" + "".join(lines) + summary + after).encode()


def test_a_cut_logs_summary_and_last_findings_are_read_from_its_tail() -> None:
    log = _long_log("========= ERROR SUMMARY: 3 errors\n")
    assert len(log) > sanitize.LOG_LIMIT
    kept, cut = _kept(log)
    got = sanitize.report("memcheck", sanitize.SANITIZER_EXIT, False, kept, cut)
    assert isinstance(got, SanitizerReport), got
    assert got.errors == 3 and got.log_cut == (HALF, len(log) - HALF, len(log)), got  # before: 1, no cut
    assert got.findings.startswith("Invalid __global__ write of size 4 bytes (FIRST)"), got.findings[:200]
    assert "(LAST)" in got.findings and f"(bytes {HALF} to {len(log) - HALF} of {len(log)})" in got.findings
    assert len(got.findings) <= sanitize.FINDINGS_LIMIT + 200


def test_a_summary_in_a_cut_logs_head_or_before_other_lines_is_not_the_tools() -> None:
    # the kernel forged a clean summary early, and the tool was killed mid-check: its head's summary
    # is not the log's end (before: read as the tool's 0 errors, "the program was killed under it")
    forged = b"========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n" + b"x" * (3 * HALF) + b"\n"
    got = sanitize.report("memcheck", 137, False, *_kept(forged))
    assert isinstance(got, SanitizerReport) and not got.finished and not got.clean, got
    # lines after the tool's summary, short or long: the summary is not the log's last (before: clean)
    for after in ("written after\n", "written after\n" * 10000):
        got = sanitize.report("synccheck", 0, False, *_kept(_long_log("========= ERROR SUMMARY: 0 errors\n", after)))
        assert isinstance(got, SanitizerReport) and not got.clean and not got.finished, (len(after), got)
    short = b"========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\njunk\n"
    got = sanitize.report("memcheck", 0, False, short)
    assert isinstance(got, SanitizerReport) and not got.clean and "not the tool's word" in got.findings, got
    # trailing blank lines are still the tool's summary last
    got = sanitize.report("memcheck", 0, False, b"========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n\n")
    assert isinstance(got, SanitizerReport) and got.clean, got


# ------------------------------------------------------------------ on a node, each runner


def test_a_long_sanitizer_log_keeps_its_summary_its_last_findings_and_says_where_it_was_cut(
    node: SshNode, tmp_path: Path, runner: str
) -> None:
    prelude = tmp_path / "junk.sh"
    prelude.write_text(JUNK)
    variants = {
        "long": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"]),
        "junk": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude, sanitize=["racecheck"]),
        "after": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["synccheck"]),
        "clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["initcheck"]),
    }
    nodes = {"t4": node.farm_entry(tmp_path / "work", build_jobs=2)}
    config = write_farm(tmp_path, nodes, [standin_job("s", variants)])
    run_farm(config)
    rows = {r["variant"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    assert {v: r["outcome"] for v, r in rows.items()} == {
        "long": "sanitizer-error",
        "junk": "sanitizer-error",
        "after": "sanitizer-error",  # before: pass, on the summary lines followed
        "clean": "pass",
    }, {v: r["reason"] for v, r in rows.items()}
    (long,) = json.loads(rows["long"]["sanitizer"])
    size = long["log_cut"][2] if long["log_cut"] else 0
    assert (long["errors"], long["exit_code"]) == (3, sanitize.SANITIZER_EXIT), long  # before: 1 error
    assert long["log_cut"] == [HALF, size - HALF, size] and size > sanitize.LOG_LIMIT, long["log_cut"]
    assert long["findings"].startswith("Invalid __global__ write of size 4 bytes (FIRST-FINDING-134)")
    assert "(LAST-FINDING-134)" in long["findings"], long["findings"][-500:]  # before: lost
    assert rows["long"]["reason"].startswith("compute-sanitizer: memcheck: 3 errors"), rows["long"]["reason"]
    (junk,) = json.loads(rows["junk"]["sanitizer"])
    assert junk["errors"] == 2 and "RACE-134-TWO" in junk["findings"] and junk["log_cut"], junk  # before: 1
    (after,) = json.loads(rows["after"]["sanitizer"])
    assert not after["finished"] and after["log_cut"], after
    assert json.loads(rows["clean"]["sanitizer"])[0]["log_cut"] is None
    # the cut, and the last findings, where a reviewer reads the cell
    cell = rows["long"]["id"]
    show = farm("show", str(cell), "--config", str(config), env=farm_env(), cwd=tmp_path)
    assert show.returncode == 0, show.stdout + show.stderr
    assert f"memcheck: 3 errors, exit 86 (log of {size} bytes; bytes {HALF} to {size - HALF} not read)" in show.stdout
    assert "(LAST-FINDING-134)" in show.stdout, show.stdout
    site = tmp_path / "site"
    done = farm("report", "--out", str(site), "--config", str(config), env=farm_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (site / "cells" / f"{cell}.html").read_text()
    assert f'id="sanitizer-memcheck-cut">Its log was cut: bytes {HALF} to {size - HALF} of {size}' in page
    assert "(LAST-FINDING-134)" in page
