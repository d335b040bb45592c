"""Review round 195, a kernel author trying kinds the farm had not met (two .cu files with relocatable
device code, a CUDA library, a run-time data file, a fat binary and -arch=native, odd variant names),
failing first where a finding was real.

1. A kernel that opens a data file shipped beside its source (`headers: [kernels/k/input.txt]`) by a
   relative path at run time failed on the card with its own "cannot open input.txt", and the reason
   said nothing of why: `headers` reach the build only, and the run starts in an empty work folder.
   The reason now names the shipped file and says so.
"""

from __future__ import annotations

from pathlib import Path

from nodes import Fleet, write_farm
from test_faults import farm_cli, results

SOURCE = """\
#include <cstdio>
int main() {
    std::FILE *f = std::fopen("input.txt", "r");
    if (!f) { std::fprintf(stderr, "data_in: cannot open input.txt\\n"); return 1; }
    std::printf("data_in: PASS\\n");
    return 0;
}
"""


def test_a_data_file_the_run_cannot_see_is_named_in_the_reason(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """Before: 'exit 1 without the pass marker (pass marker 'data_in: PASS'; stdout was empty); last stderr
    line: "data_in: cannot open input.txt"', no word of why. Figure: 1 cell on the t4 stand-in, fail;
    its reason names kernels/data_in/input.txt and the empty work folder."""
    job = {
        "kernel": "data_in",
        "sources": ["kernels/data_in/data_in.cpp"],
        "headers": ["kernels/data_in/input.txt"],
        "pass_marker": "data_in: PASS",
        "refusal_marker": "data_in: needs CC",
        "timeout": 30,
        "variants": {
            "plain": {"build": "g++ -O1 -o {binary} {sources}", "inspect": "objdump -d {binary}", "cc": {"min": "7.5"}}
        },
    }
    config = write_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [job])
    (tmp_path / "kernels" / "data_in").mkdir()
    (tmp_path / "kernels" / "data_in" / "data_in.cpp").write_text(SOURCE)
    (tmp_path / "kernels" / "data_in" / "input.txt").write_text("4096\n")
    done = farm_cli(tmp_path, "verify", "--all", "--quiet", "--config", str(config), "--no-report")
    row = results(tmp_path / "results.db", 1)[("t4", "plain")]
    assert row["outcome"] == "fail", (row["reason"], done.stdout, done.stderr)
    assert "cannot open input.txt" in row["reason"], row["reason"]
    assert "kernels/data_in/input.txt" in row["reason"] and "empty work folder" in row["reason"], row["reason"]


ASSERTS = """\
#include <cstdio>
int main() {
    std::fprintf(stderr, "kernels/asserts/asserts.cuh:42: void k(): block: [0,0,0], "
                         "thread: [0,0,0] Assertion `x` failed.\\n");
    return 1;
}
"""


def test_a_device_assert_naming_a_header_is_no_missing_data_file(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """A failing kernel's last line names its header as a device assert does (file:line: ... Assertion
    failed). Figure: fail, quoting the assert, with no word of a file "shipped for the build only" (the
    header reached the build, where it was needed: a hint that sent the author to move it was wrong)."""
    job = {
        "kernel": "asserts",
        "sources": ["kernels/asserts/asserts.cpp"],
        "headers": ["kernels/asserts/asserts.cuh"],
        "pass_marker": "asserts: PASS",
        "refusal_marker": "asserts: needs CC",
        "timeout": 30,
        "variants": {
            "plain": {"build": "g++ -O1 -o {binary} {sources}", "inspect": "objdump -d {binary}", "cc": {"min": "7.5"}}
        },
    }
    config = write_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [job])
    (tmp_path / "kernels" / "asserts").mkdir()
    (tmp_path / "kernels" / "asserts" / "asserts.cpp").write_text(ASSERTS)
    (tmp_path / "kernels" / "asserts" / "asserts.cuh").write_text("#pragma once\n")
    done = farm_cli(tmp_path, "verify", "--all", "--quiet", "--config", str(config), "--no-report")
    row = results(tmp_path / "results.db", 1)[("t4", "plain")]
    assert row["outcome"] == "fail", (row["reason"], done.stdout, done.stderr)
    assert "Assertion" in row["reason"] and "build only" not in row["reason"], row["reason"]
