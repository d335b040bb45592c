"""Review round 95, a kernel author new to the course: the README followed literally, failing first.

1. A newcomer's `cc: "9.0"` (or `cc: 9.0`, a variant written as its build line alone, a metric as
   its unit) was refused with pydantic's words: "expected a valid dictionary or instance of
   ContractSpec" -- a Python class's name, and nothing of how to write the key.
2. A build that failed said only "the build exit 2" on the terminal, in `farm show`'s outcome, in
   the matrix and on the cell page's head: nvcc's own error (the line that says what to fix) was
   only in the build log, at the bottom of the cell page, under the node's bundle path.
3. A cell not as expected printed `BAD  build-fail  toy:plain@here ...  #1` on the terminal: no
   reason, and nothing said `#1` is the result `farm show 1` prints (the README's table names
   `farm show RESULT_ID`, never where the ID is).
4. A kernel that exited 0 without its pass marker was "exit 0 but no pass marker on stdout": which
   pattern was looked for (a newcomer's `PASS` against a kernel that prints `Passed`) and what the
   kernel printed last were on no page.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from nodes import CARDS, nvidia_smi_script, smi_on_path
from test_faults import farm_cli
from toyfarm import toy_farm

from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.errors import EXIT_CONFIG, EXIT_UNEXPECTED
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run.stages.failure_words import marker_missing


def _job(root: Path, old: str, new: str) -> None:
    job = root / "jobs" / "toy.yaml"
    text = job.read_text()
    assert old in text, text
    job.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    ("old", "new", "key", "expected"),
    [
        ("cc: {min: '7.5'}", 'cc: "9.0"', "variants.plain.cc", '{min: "7.5"}'),
        ("cc: {min: '7.5'}", "cc: 9.0", "variants.plain.cc", '{exactly: "9.0"}'),
        (
            "  plain:\n    build: 'g++ -O1 -o {binary} {sources}'\n    inspect: 'objdump -d {binary}'\n"
            "    instructions: {ret: 1}\n    cc: {min: '7.5'}\n",
            "  plain: 'g++ -O1 -o {binary} {sources}'\n",
            "variants.plain",
            "build:",
        ),
        ("    instructions: {ret: 1}\n", "    instructions: [ret]\n", "variants.plain.instructions", "{HMMA: 1}"),
        ("variants:\n  plain:", "variants:\n  - plain:", "variants", "a mapping"),
    ],
)
def test_a_newcomers_scalar_or_list_where_a_mapping_belongs_is_told_how_to_write_it(
    tmp_path: Path, old: str, new: str, key: str, expected: str
) -> None:
    toy_farm(tmp_path)
    _job(tmp_path, old, new)
    done = farm_cli(tmp_path, "jobs", "toy", timeout=60)
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    line = next((x for x in done.stderr.splitlines() if f": {key}: found " in x), "")
    assert "toy.yaml" in line, done.stderr
    assert "instance of" not in line and "Spec" not in line and "valid dictionary" not in line, line
    assert expected in line, line


def test_a_failed_build_says_its_compilers_error_everywhere_the_verdict_is_said(tmp_path: Path) -> None:
    config = toy_farm(tmp_path, source='#include <cstdio>\nint main() { std::printf("toy: PASS\\n") }\n')
    done = farm_cli(tmp_path, "verify", "--all", "--config", str(config))
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "results.db") as db:
        result_id, reason = db.execute("SELECT id, reason FROM results").fetchone()
    # g++'s own line, with the kernel's path as the project names it, not the node's bundle folder
    assert reason.startswith("the build exit 1: ") and "kernels/toy.cpp:2:" in reason and "error" in reason, reason
    assert "bundles/" not in reason, reason
    # 3. the terminal's line says why, and which `farm show` has the rest
    bad = next(x for x in done.stdout.splitlines() if "BAD " in x)
    assert "kernels/toy.cpp:2:" in bad and f"farm show {result_id}" in bad, bad
    shown = farm_cli(tmp_path, "show", str(result_id), "--config", str(config))
    outcome = next(x for x in shown.stdout.splitlines() if x.startswith("outcome"))
    assert "kernels/toy.cpp:2:" in outcome, shown.stdout
    index = (tmp_path / "reports" / "index.html").read_text()
    assert 'class="why">the build exit 1: &#34;kernels/toy.cpp:2:' in index, "the matrix's cell says it too"
    page = (tmp_path / "reports" / "cells" / f"{result_id}.html").read_text()
    assert page.count("kernels/toy.cpp:2:") >= 2, "the page's head says it, not only the build log"
    # nothing ran: no marker was looked for, in no stream (it said "not found (matched over the whole stream)")
    assert "<dt>pass marker</dt><dd>not looked for: the kernel did not run</dd>" in page, page
    assert "matched over the whole stream" not in page


def test_a_linker_that_cannot_find_a_library_is_the_line_said(tmp_path: Path) -> None:
    config = toy_farm(tmp_path, broken="fails")
    done = farm_cli(tmp_path, "verify", "toy:broken", "--config", str(config))
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "results.db") as db:
        (reason,) = db.execute("SELECT reason FROM results").fetchone()
    assert "cannot find -lno_such_library" in reason, reason  # ld's line, not collect2's "ld returned 1"


def test_a_missing_pass_marker_names_the_pattern_and_what_the_kernel_printed_last() -> None:
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=0, kernel_started=True)
    ev.no_pass = marker_missing("PASS", "Test passed")  # what the run stage sets
    exp = Expectation(Outcome.PASS, "contract admits", cc=ComputeCapability.parse("8.0"))
    verdict = classify(ev, exp)
    assert verdict.outcome is Outcome.FAIL
    assert "'PASS'" in verdict.reason and '"Test passed"' in verdict.reason, verdict.reason


def test_a_run_without_its_pass_marker_says_the_pattern_and_the_kernels_last_stdout_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)  # the card runs the toy
    source = '#include <cstdio>\nint main() { std::printf("toy: Passed\\n"); return 0; }\n'
    config = toy_farm(tmp_path, source=source)
    done = farm_cli(tmp_path, "verify", "--all", "--config", str(config))
    assert done.returncode == EXIT_UNEXPECTED, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "results.db") as db:
        (reason,) = db.execute("SELECT reason FROM results").fetchone()
    assert reason == "exit 0 but no pass marker on stdout (pass marker 'toy: PASS'; last stdout line: \"toy: Passed\")"
