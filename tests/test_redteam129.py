"""Red-team round 129: kernels that tamper with their own binary, and a pass line the streams split.

Each run through the whole farm on a loopback SSH node (a T4 stand-in, CC 7.5), on the python runner
(confined where the node's kernel has Landlock) and the shell runner (never confined).

Broke (before/after): nothing this round; every attack below held.

Held (kept as guards):
- A kernel that, while it runs, replaces its own private copy and the shared cached build with a
  script printing the pass marker and a tamper mark: the run's certificate names the binary the
  farm built and hashed (not the fake), and a warm rerun of the same cell never runs the fake: the
  cached build is reused only where it hashes to the recorded sha256, else rebuilt (or the write
  refused, confined), and the rerun's binary sha256 is the first run's.
- The pass marker split across the streams (`standin: ` on stdout, `PASS` on stderr, exit 0):
  a terminal's `2>&1` shows `standin: PASS`, but it is no pass: `fail`, "no pass marker on stdout".
- The pass marker whole on stderr only, exit 0: `fail` likewise.
- A job file whose list is an alias of itself (`headers: &h [*h]`, a recursive YAML node that
  PyYAML builds as a list holding itself): exit 3 naming the key, no crash or hang.

Open: a journal from a machine whose clock ran hours ahead (its run's `started_at` in the future)
makes `farm import` refuse every later journal of a correct clock as "started before run N"
(orchestrator/store/recovery.py orders by started_at): not changed here (store/* is another
engineer's this round); the refusal is explicit and names the way out (a database of its own).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from farm_cli import farm
from nodes import Fleet, query, standin_job, standin_variant
from test_verdicts import run

MIN75 = {"min": "7.5"}

# A kernel of its own: `standin: ` on stdout, `PASS` on stderr (or the whole marker on stderr), exit 0.
SPLIT = r"""
#include <stdio.h>
int main(void) {
#if defined(WHOLE_ON_STDERR)
    fprintf(stderr, "standin: PASS\n");
#else
    printf("standin: ");
    fflush(stdout);
    fprintf(stderr, "PASS\n");
    printf("\n");
#endif
    return 0;
}
"""


def _results(db: Path) -> list[dict[str, object]]:
    found = query(db, "SELECT run_id, outcome, reason, stdout, binary_sha256 FROM results ORDER BY id")
    return [
        {
            "run": r["run_id"],
            "outcome": r["outcome"],
            "reason": r["reason"] or "",
            "stdout": bytes(r["stdout"] or b""),
            "sha": r["binary_sha256"],
        }
        for r in found
    ]


# ------------------------------------------------------------------ A: a kernel that replaces its own binary


def _tamper_prelude(path: Path, workdir: Path) -> Path:
    """Shell the kernel runs first: every copy of its binary the node's user can reach (its cell's
    private copy, ../bin/*, and the shared build under builds/) removed and replaced by a script that
    prints the pass marker and a tamper mark. Errors (a confined write refused) are ignored."""
    fake = '#!/bin/sh\\necho "standin: PASS"\\necho TAMPERED-BINARY-RAN\\n'
    path.write_text(
        "for f in ../bin/* $(find "
        + str(workdir)
        + " -path '*/builds/*' -type f -name 'standin-v' 2>/dev/null); do\n"
        + f'  rm -f "$f" 2>/dev/null && printf \'{fake}\' > "$f" 2>/dev/null && chmod +x "$f" 2>/dev/null\n'
        + "done\ntrue\n"
    )
    return path


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_kernel_that_replaces_its_own_binary_never_has_the_fake_certified(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """The first run passes on the binary the farm built (its sha256 recorded); the kernel then
    swapped every copy it could reach for a fake that prints the pass marker. The warm rerun must
    not run the fake: its stdout holds no tamper mark, and its binary sha256 is the first's."""
    root = tmp_path / "farm"
    workdir = root / "work"
    prelude = _tamper_prelude(tmp_path / "tamper.sh", workdir)
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
    entry = ssh_fleet["t4"].farm_entry(workdir, runner=runner)
    config = make_farm(root, {"t4": entry}, [standin_job("standin", {"v": variant})], retries=0)
    run(config)
    cached = [f.read_bytes() for f in (workdir / "builds").rglob("standin-v") if f.is_file()]
    if runner == "shell":  # unconfined: the swap took (else this guard would test nothing)
        assert cached and all(b"TAMPERED-BINARY-RAN" in data for data in cached), cached
    run(config)
    first, second = _results(root / "results.db")
    assert first["outcome"] == "pass", first
    assert b"TAMPERED-BINARY-RAN" not in first["stdout"] and b"TAMPERED-BINARY-RAN" not in second["stdout"], second
    assert first["sha"] and second["sha"] == first["sha"], (first["sha"], second["sha"])
    # the rerun is the real kernel again (or no verdict where the node could not give it one): never the fake's green
    assert second["outcome"] in ("pass", "infra-error"), second
    if second["outcome"] == "pass":
        assert b"standin: device CC 7.5" in second["stdout"], second


# ------------------------------------------------------------------ B: the pass marker across the streams


def _split_cell(make_farm, root: Path, fleet: Fleet, flag: str) -> dict[str, object]:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "split.c").write_text(SPLIT)
    variant = {
        "build": f"gcc -O1 {flag} -o {{binary}} {{sources}}",
        "inspect": "objdump -d {binary}",
        "instructions": {"call": 1},
        "cc": MIN75,
    }
    job = standin_job("split", {"v": variant}, sources=["kernels/split.c"])
    config = make_farm(root, {"t4": fleet["t4"].farm_entry(root / "work")}, [job], retries=0)
    run(config)
    (cell,) = _results(root / "results.db")
    return cell


@pytest.mark.parametrize("flag", ["", "-DWHOLE_ON_STDERR"])
def test_a_pass_marker_split_across_or_on_stderr_is_no_pass(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, flag: str
) -> None:
    """`standin: ` on stdout and `PASS` on stderr reads `standin: PASS` merged (2>&1, a terminal);
    the marker whole on stderr reads as one. Neither is the kernel's pass line on stdout."""
    cell = _split_cell(make_farm, tmp_path / "farm", ssh_fleet, flag)
    assert cell["outcome"] == "fail", cell
    assert "no pass marker on stdout" in str(cell["reason"]), cell


# ------------------------------------------------------------------ C: a YAML list that holds itself


def test_a_job_list_that_is_its_own_alias_is_refused_naming_the_key(make_farm, tmp_path: Path) -> None:
    """`headers: &h [*h]` composes to a list holding itself (PyYAML builds recursive lists): the
    farm must refuse it as a config error on that key, not loop, recurse or crash (exit 70)."""
    root = tmp_path / "farm"
    variant = standin_variant("PASS", MIN75, "MIN_CC=75")
    config = make_farm(
        root, {"t4": {"transport": "local", "workdir": str(root / "work")}}, [standin_job("standin", {"v": variant})]
    )
    job_file = next((root / "jobs").glob("*.yaml"))
    job_file.write_text(job_file.read_text() + "headers: &h [*h]\n")
    done = farm("jobs", "--config", str(config), timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "headers[0]" in done.stderr and "bug in farm" not in done.stderr, done.stderr
