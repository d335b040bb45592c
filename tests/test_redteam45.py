"""Red-team round 45: cells the farm judged an expected refusal (or a pass) that did not earn it."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodes import Fleet, standin_job, standin_variant
from test_redteam42 import on_the_t4
from test_verdicts import EXACT90, rows, run


@pytest.mark.parametrize(
    "sent",
    [
        "{binary}; taskset -c 4095 {binary}",  # the kernel ran, exit 0; then a launcher failed
        "taskset -c 4095 {binary}; {binary}",  # a launcher failed; then the kernel ran, exit 0
    ],
)
def test_a_kernel_command_that_exits_0_on_a_card_it_must_refuse_is_no_refusal(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str, sent: str
) -> None:
    """A kernel without a gate (it runs on any card and passes) called twice, once through a
    launcher that fails before it starts the kernel (`taskset -c 4095`: "failed to set pid N's
    affinity: Invalid argument", exit 1), with a refusal marker those words match. The failing
    launcher's status was the run's first failing kernel status, its words on the kernel's stderr
    matched the refusal marker, and the copy had been read (by the other call, whose kernel ran on
    the card it must refuse and exited 0): the round-42 check that the binary was read passed, and
    the cell was an expected refusal. A kernel command that exits 0 ran the kernel on that card:
    no refusal, whatever another command printed."""
    variants = {"twice": standin_variant("NOGATE", EXACT90, "EXACT_CC=90", run=sent)}
    row = on_the_t4(
        ssh_fleet, make_farm, tmp_path, [standin_job("standin", variants, refusal_marker=r"(?i)invalid argument")]
    )[("twice", "Tesla T4")]
    assert row["outcome"] == "missing-refusal", row["reason"]


def test_a_kernel_status_of_0_beside_a_failing_one_is_no_refusal() -> None:
    """classify: statuses [0, 1] with the refusal text on stderr were an expected refusal."""
    from orchestrator.classify import Evidence, classify
    from orchestrator.outcomes import Outcome
    from orchestrator.plan import Expectation

    seen = {"build_exit": 0, "inspect_exit": 0, "run_exit": 1, "kernel_started": True, "kernel_exit": 1}
    must_refuse = Expectation(Outcome.EXPECTED_REFUSAL, "CC 7.5 is outside CC == 9.0")
    ran = classify(Evidence(**seen, refusal_line=1, kernel_exited_0=True), must_refuse)
    assert ran.outcome is Outcome.MISSING_REFUSAL, ran.reason
    gated = classify(Evidence(**seen, refusal_line=1), must_refuse)
    assert gated.outcome is Outcome.EXPECTED_REFUSAL, gated.reason


# a library the build links the kernel against, found at run time through the binary's RUNPATH `.`:
# the kernel's work folder, which the run's other commands write
def _octal(c_text: str) -> str:
    """C text for printf, its braces and parentheses as octal escapes (the loader reads `{...}` as a
    template field and `((` as what sh and bash read differently)."""
    return "".join(f"\\{ord(c):03o}" if c in "{}()" else c for c in c_text)


RPATH_BUILD = (
    f"printf '{_octal('void farm_x(void) {}')}\\n' > x.c && gcc -shared -fPIC -o libx.so x.c && "
    "g++ -O1 -DMODE_FAILNUM -DMIN_CC=75 -o {binary} {sources} -L. -Wl,--no-as-needed -lx -Wl,-rpath,."
)
# the run's own library in its place, whose constructor prints the marker and ends the kernel with exit 0
CONSTRUCTOR = (
    "#include <stdio.h>\\n#include <unistd.h>\\n__attribute__((constructor)) static void f(void) "
    '{ puts("standin: P" "ASS"); fflush(stdout); _exit(0); }\\n'
)
RPATH_RUN = f"printf '{_octal(CONSTRUCTOR)}' > y.c && gcc -shared -fPIC -o libx.so y.c && {{binary}}"


@pytest.mark.parametrize("runner_kind", ["auto", "cell"])
def test_a_kernel_that_loads_code_from_where_its_run_writes_is_no_pass(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner_kind: str
) -> None:
    """The run may not set LD_PRELOAD or LD_LIBRARY_PATH (the code the kernel's process loads is the
    node's), but the build could write the same into the binary: linked with `-Wl,-rpath,.`, the
    kernel's dynamic loader looks for its libraries in its current folder, the work folder the run's
    other commands write. A run that compiled its own libx.so there, whose constructor printed the
    marker and exited 0, passed a kernel that fails its numbers (MODE_FAILNUM), its copy hashed and
    inspected as built. The node's runner now reads the copy's ELF (its interpreter, RPATH and
    RUNPATH, or a script's `#!`) before the run: a folder named relative to the current one, or one
    where a run may write (its cell's folder, /tmp, /var/tmp, /dev), fails the cell."""
    monkeypatch.setenv("FARM_TEST_RUNNER", runner_kind)
    variants = {
        "rpath": {"build": RPATH_BUILD, "inspect": "objdump -d {binary}", "cc": {"min": "7.5"}, "run": RPATH_RUN}
    }
    row = on_the_t4(ssh_fleet, make_farm, tmp_path, [standin_job("standin", variants)])[("rpath", "Tesla T4")]
    assert row["outcome"] == "fail", row["reason"]
    assert "loads" in row["reason"], row["reason"]


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        ("", ""),
        ("-Wl,-rpath,'$ORIGIN'", ""),  # the copy's own bin/: only the runner writes there
        ("-Wl,-rpath,/usr/lib", ""),
        ("-Wl,-rpath,.", "."),
        ("-Wl,-rpath,'$ORIGIN/../work'", "$ORIGIN/../work"),
        ("-Wl,-rpath,/usr/lib:/tmp/lib", "/tmp/lib"),
        ("-Wl,--enable-new-dtags,-rpath,/dev/shm", "/dev/shm"),  # RUNPATH, not RPATH
        ("-Wl,--dynamic-linker=/tmp/ld.so", "/tmp/ld.so"),
        ("-Wl,--no-as-needed ./libx.so", "./libx.so"),  # a library named by path (it has no soname)
    ],
)
def test_what_a_copy_loads_from_where_its_run_writes_is_found(tmp_path: Path, flags: str, refused: str) -> None:
    """node/loads.py: the ELF's interpreter, RPATH, RUNPATH and libraries named by path, checked."""
    import subprocess

    from orchestrator.run.node.loads import loads_writable

    cell = tmp_path / "cell"
    (cell / "bin").mkdir(parents=True)
    (tmp_path / "x.c").write_text("void farm_x(void) {}\n")
    (tmp_path / "k.c").write_text("int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libx.so", "x.c"], cwd=tmp_path, check=True)
    copy = cell / "bin" / "k"
    subprocess.run(f"gcc -o {copy} k.c {flags}", shell=True, cwd=tmp_path, check=True)
    assert loads_writable(str(copy), str(cell)) == refused
    script = cell / "bin" / "s"
    script.write_text("#!./sh\n")
    assert loads_writable(str(script), str(cell)) == "./sh"


def test_a_disassembler_where_a_run_may_write_is_refused(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A confined kernel may write /dev (its GPU's nodes, /dev/shm) and the node's /tmp. One run's
    kernel left /dev/shm/.../objdump, a script printing `HGMMA`; a later run's cell whose inspect
    named it (`/dev/shm/.../objdump -d {binary}`, one command of a disassembler by its name, as the
    loader asked) had its x86 binary counted with the HGMMA it asked for, and passed. A disassembler
    named relative to the cell's folder or by a path in /tmp, /var/tmp, /dev or /proc is refused at
    load, as a launcher there is not run."""
    import shutil

    from test_verdicts import MIN75

    from orchestrator.errors import ConfigErrors

    fake = f"/dev/shm/rt45-{tmp_path.name}"
    plant = (
        f"mkdir -p {fake} && printf '#!/bin/sh\\necho \"  0: HGMMA.64x128x16\"\\n' > {fake}/objdump && "
        f"chmod +x {fake}/objdump && {{binary}}"
    )
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    try:
        planted = {"plant": standin_variant("PASS", MIN75, "MIN_CC=75", run=plant)}
        _, summary = run(make_farm(tmp_path / "a", nodes, [standin_job("plant", planted)]))
        assert rows(tmp_path / "a" / "results.db", summary.run_id)[("plant", "Tesla T4")]["outcome"] == "pass"
        for named in (f"{fake}/objdump", "/dev//shm/./x/objdump", "/t'm'p/x/objdump", "bin/objdump"):
            inspect = f"{named} -d {{binary}}"
            counted = {
                "counted": standin_variant("PASS", MIN75, "MIN_CC=75", inspect=inspect, instructions={"HGMMA": 1})
            }
            config = make_farm(tmp_path / "b", nodes, [standin_job("standin", counted)])
            with pytest.raises(ConfigErrors, match=r"in a folder any kernel's run may write|named relative"):
                run(config)
    finally:
        shutil.rmtree(fake, ignore_errors=True)
    fine = {"fine": standin_variant("PASS", MIN75, "MIN_CC=75", inspect="/usr/bin/objdump -d {binary}")}
    _, summary = run(make_farm(tmp_path / "c", nodes, [standin_job("standin", fine)]))
    assert rows(tmp_path / "c" / "results.db", summary.run_id)[("fine", "Tesla T4")]["outcome"] == "pass"


@pytest.mark.parametrize(
    "sent",
    [
        "taskset -c 4095 {binary}; {binary}",  # kernel commands alone: the shell's function
        "cd . && taskset -c 4095 {binary}; {binary}",  # with another command: the runner starts each
    ],
)
def test_a_launcher_that_failed_before_the_kernel_beside_a_call_that_read_it_is_no_refusal(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str, sent: str
) -> None:
    """Round 42 made a run whose kernel's copy was never read no refusal (`taskset -c 4095 {binary}`
    fails before it runs the kernel, "Invalid argument"). The check was the run's: a second kernel
    command that did run the kernel read the copy, and the first, failing one was judged, its
    launcher's words matching the refusal marker. A kernel whose gate let it run on the card it
    must refuse (built for CC >= 7.5, its contract CC == 9.0), failing its numbers there, was an
    expected refusal. Each kernel command's read is checked now: a failing one that never read the
    copy is no refusal."""
    failing = standin_variant("FAILNUM", EXACT90, "MIN_CC=75", run=sent)
    row = on_the_t4(
        ssh_fleet,
        make_farm,
        tmp_path,
        [standin_job("standin", {"failing": failing}, refusal_marker=r"(?i)invalid argument")],
    )[("failing", "Tesla T4")]
    assert row["outcome"] == "missing-refusal", row["reason"]
    assert "never read" in row["reason"], row["reason"]


@pytest.mark.parametrize(
    ("run", "once"),
    [
        ("{binary}", True),
        ("taskset -c 4095 {binary} 1.0", True),
        ("{binary}; {binary}", False),
        ("taskset -c 4095 {binary}; {binary}", False),
        ("{binary} || {binary}", False),
        ("for c in 0 4095; do taskset -c $c {binary}; done", False),
        ("f() { {binary}; }; f; f", False),
    ],
)
def test_the_check_around_each_kernel_command_is_spared_only_for_one_that_runs_once(run: str, once: bool) -> None:
    """The per-command read check costs two process starts a call (bench/README, session 26):
    a run of one kernel command that runs once has its run's own check, the same one. A loop or a
    function may run one command twice, the second time through a launcher that fails: checked."""
    from orchestrator.config.kernel_calls import runs_once

    assert runs_once(run) is once
