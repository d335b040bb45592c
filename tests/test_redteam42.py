"""Red-team round 42: runs whose kernel commands did not all end, or whose statuses were not all
read, and that the farm still judged `pass`."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodes import Fleet, standin_job, standin_variant
from test_verdicts import EXACT90, MIN75, rows, run

from orchestrator.errors import ConfigErrors

# a "kernel" the build writes as a script: it passes, but fails when called with `bad`, after
# SLEEP seconds when called with `slow`
SCRIPT_BUILD = (
    'test -f {sources} && printf \'#!/bin/sh\\ncase "$1" in slow) sleep 3; echo broken >&2; exit 1;; '
    'bad) echo broken >&2; exit 1;; esac\\necho "standin: PASS"\\n\' > {binary} && chmod +x {binary}'
)


def script_variant(run_text: str) -> dict[str, object]:
    return {"build": SCRIPT_BUILD, "inspect": "test -x {binary}", "cc": MIN75, "run": run_text}


def on_the_t4(ssh_fleet: Fleet, make_farm, tmp_path: Path, jobs: list) -> dict:
    """The jobs run on the fleet's T4 node in a farm of tmp_path: its rows by (variant, device)."""
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    _, summary = run(make_farm(tmp_path, nodes, jobs))
    return rows(tmp_path / "results.db", summary.run_id)


@pytest.mark.parametrize(
    "sent",
    [
        "{binary}; ( {binary} slow ) &",  # a subshell: the `&` after its `)` went unseen
        "{binary}; {binary} slow && true &",  # the and-or list whose last command goes to the background
        "{binary}; ( {binary} slow ) | cat &",  # a subshell in a pipeline
        "f() ( {binary} slow ); {binary}; f &",  # a function of the run's
        "f() ( {binary} slow )\nalias k='f &'\n{binary}; k",  # an alias, whose text no check read
    ],
)
def test_a_kernel_command_sent_to_the_background_in_a_list_or_compound_is_refused(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, sent: str
) -> None:
    """The loader refused `&` right after a kernel command, but not after a subshell, group, loop,
    function call, or an and-or list or pipeline, holding one. The run's shell ended at once, the
    farm killed the second kernel before it ended (its status never noted), and the first one's exit
    0 and pass marker made the cell `pass` (under every runner), its second kernel command never
    finished (it would have failed). Only a simple command without the kernel (a daemon) may go to
    the background."""
    variants = {"background": script_variant(sent)}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    with pytest.raises(ConfigErrors, match=r"sends to the background what may run the kernel|`alias`"):
        run(config)


def test_a_kernel_command_a_sourced_script_sends_to_the_background_is_no_pass(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """What a script the run sources does, no check at load can read: `f &` there ran the run's
    function, with its kernel command, in the background. The kernel started, the run ended a second
    later, the farm killed it with no status noted, and the first call's exit 0 and marker passed the
    cell, its second kernel command cut off mid-run (it would have failed). Each kernel command's
    start is noted now, and one with no status after it fails the cell."""
    sourced = "f() ( {binary} slow ); {binary}; echo 'f &' > b.sh; . ./b.sh; sleep 1"
    variants = {"sourced": script_variant(sourced)}
    row = on_the_t4(ssh_fleet, make_farm, tmp_path, [standin_job("standin", variants)])[("sourced", "Tesla T4")]
    assert row["outcome"] == "fail", row["reason"]
    assert "had not ended when the run did" in row["reason"], row["reason"]


def test_a_failing_kernel_command_past_the_statuses_the_farm_reads_is_no_pass(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """The farm read back the first 4096 bytes of the kernel commands' statuses: a run calling
    the kernel 2048 times had the failing status of its next call cut off, and with the run's own
    last command exit 0, a kernel command that failed passed the cell."""
    many = "i=0; while [ $i -lt 2048 ]; do {binary}; i=$((i + 1)); done; {binary} bad; {binary}"
    variants = {"many": dict(script_variant(many), timeout=300)}
    many_row = on_the_t4(ssh_fleet, make_farm, tmp_path, [standin_job("standin", variants)])[("many", "Tesla T4")]
    assert many_row["outcome"] == "fail", many_row["reason"]


def test_statuses_past_what_the_farm_reads_back_are_no_pass() -> None:
    """Past the farm's limit on the statuses it reads back (commands.STATUS_LIMIT), a failing
    status may be among those not read: neither a pass nor an expected refusal."""
    from orchestrator.classify import Evidence, classify
    from orchestrator.outcomes import Outcome
    from orchestrator.plan import Expectation

    seen = {
        "build_exit": 0,
        "inspect_exit": 0,
        "run_exit": 0,
        "kernel_started": True,
        "kernel_exit": 0,
        "pass_line": 1,
        "kernel_statuses_cut": True,
    }
    must_run = Expectation(Outcome.PASS, "CC 7.5 satisfies CC >= 7.5")
    assert classify(Evidence(**seen), must_run).outcome is Outcome.FAIL
    must_refuse = Expectation(Outcome.EXPECTED_REFUSAL, "CC 7.5 is outside CC == 9.0")
    refused = dict(seen, run_exit=1, kernel_exit=1, pass_line=None, refusal_line=1)
    assert classify(Evidence(**refused), must_refuse).outcome is Outcome.MISSING_REFUSAL


def test_a_launcher_that_fails_before_the_kernel_is_no_refusal(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """`taskset -c 4095 {binary}` on a node with fewer CPUs: taskset fails before it runs the kernel,
    printing "failed to set pid N's affinity: Invalid argument" on the kernel's stderr, and exits 1.
    With a refusal marker a CUDA gate might well print ("invalid argument", cudaErrorInvalidValue's
    words), a kernel that never ran (and would have run on the card it must refuse) was an expected
    refusal. The node now sets the copy's access time to 0 before the run and reads it after: still
    0, no command read the kernel, and the cell is no refusal. A gated kernel that refuses through a
    launcher that works is still an expected refusal."""
    variants = {"pinned": standin_variant("NOGATE", EXACT90, "EXACT_CC=90", run="taskset -c 4095 {binary}")}
    gated = {"gated": standin_variant("PASS", EXACT90, "EXACT_CC=90", run="taskset -c 0 {binary}")}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    jobs = [standin_job("standin", variants, refusal_marker=r"(?i)invalid argument"), standin_job("gate", gated)]
    config = make_farm(tmp_path, nodes, jobs)
    _, summary = run(config)
    found = rows(tmp_path / "results.db", summary.run_id)
    row = found[("pinned", "Tesla T4")]
    assert row["outcome"] == "missing-refusal", row["reason"]
    assert "never read" in row["reason"], row["reason"]
    assert found[("gated", "Tesla T4")]["outcome"] == "expected-refusal", found[("gated", "Tesla T4")]["reason"]
