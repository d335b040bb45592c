"""Red-team round 249: a build, an inspection or a sanitizer run that takes the bits of the farm's own folders.

Broke (before/after): round 247 noted and set back the modes of the farm's own folders (the work folder,
builds/, bundles/, cells/, incoming/, the run's and node's folders) around the RUN stage only. A job's build
command, its inspect command and the sanitize stage's runs execute the job's or the kernel's code too, and
Landlock (run/node/confine.py) handles no chmod: a build that took the bits of builds/ left its own binary
unhashable ("wrote no binary") and every later build of the node failed to make its folder; one that took
cells/'s had its copy fail (the clear copy-failed words, but nothing set back, the build not blamed); an
inspection or a sanitizer run that took cells/'s left every later cell's copy failing. Now each of these
stages notes the modes before the job's or kernel's code and sets back any that changed after it (in the
stage's own script or plan: no round trip more), and that stage is blamed as round 247 blames the run: no
green (build-fail, inspect-fail, fail), or no verdict where it failed anyway; the node's later runs pass.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import test_redteam244
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script
from test_redteam121 import NO_HOME_UID
from test_redteam244 import BUILD, VICTIM, _rows

from orchestrator.classify import Evidence, classify
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run.work_folder import modes_sh

node_home = test_redteam244.node_home  # its fixture, by its name

RUNNERS = ("python", "shell")
INSPECT = "objdump -d {binary}"

# a kernel that passes, and under compute-sanitizer (the stand-in sets STANDIN_SANITIZER_TOOL) takes
# every bit of TARGET on its way
UNDER_TOOL = r"""
#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>
int main() {
    if (std::getenv("STANDIN_SANITIZER_TOOL")) chmod("TARGET", 0);  // Landlock handles no chmod
    std::printf("toy: PASS\n");
    return 0;
}
"""

# the stand-in compute-sanitizer of tests/nodes.py, but writing its log and running the program
SANITIZER = """#!/bin/sh
log=
while [ $# -gt 0 ]; do
    case "$1" in
        --log-file) log=$2; shift 2 ;;
        --tool|--error-exitcode|--print-limit) shift 2 ;;
        --*) shift ;;
        *) break ;;
    esac
done
STANDIN_SANITIZER_TOOL=memcheck "$@"; rc=$?
printf '========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors\\n' > "${log:-/dev/stderr}"
exit $rc
"""


def _farm(
    root: Path,
    name: str,
    source: str,
    runner: str,
    build: str = BUILD,
    inspect: str = INSPECT,
    sanitize: bool = False,
) -> subprocess.CompletedProcess[str]:
    """test_redteam244's farm (its local node a T4 stand-in, nvcc the toolkit the node's user owns, run as
    that user) of one kernel NAME, its cells run by RUNNER (the node's python3, or `runner: shell`),
    its build and inspect commands those given, and compute-sanitizer's memcheck after a pass where
    SANITIZE (a stand-in that runs the program)."""
    for folder in ("kernels", "jobs", "smi"):
        (root / folder).mkdir(exist_ok=True)
    (root / "kernels" / f"{name}.cu").write_text(source)
    (root / "jobs" / f"{name}.yaml").write_text(
        f"kernel: {name}\nsources: [kernels/{name}.cu]\npass_marker: 'toy: PASS'\nrefusal_marker: 'needs CC'\n"
        f"variants:\n  plain:\n    build: '{build}'\n    inspect: '{inspect}'\n"
        + ("    instructions: {ret: 1}\n" if inspect == INSPECT else "")  # else any command may inspect
        + "    cc: {min: '7.5'}\n"
        + ("    sanitize: [memcheck]\n" if sanitize else "")
    )
    smi, tool = root / "smi" / "nvidia-smi", root / "smi" / "compute-sanitizer"
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    tool.write_text(SANITIZER)
    config = root / "farm.yaml"
    config.write_text(
        "database: sqlite:///results.db\nreports: reports\nnodes:\n  here:\n    transport: local\n"
        f"    nvcc: {root / 'cuda' / 'bin' / 'nvcc'}\n    workdir: {root / 'node'}\n"
        f"    compute_sanitizer: {tool}\n" + ("    runner: shell\n" if runner == "shell" else "")
    )
    for path in (smi, tool):
        path.chmod(0o755)
    owned = [str(root / "kernels"), str(root / "jobs"), str(smi.parent), str(config)]
    subprocess.run(["chown", "-R", f"{NO_HOME_UID}:{NO_HOME_UID}", *owned], check=True)
    env = {"PATH": f"{smi.parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    setpriv = ["setpriv", f"--reuid={NO_HOME_UID}", f"--regid={NO_HOME_UID}", "--clear-groups"]
    return farm("verify", f"{name}:plain", "--no-report", "--config", str(config), cwd=root, env=env, wrapper=setpriv)


def _cells(root: Path) -> Path:
    """The node's cells/ folder, made (as the node's user) before the farm's first run: a build takes
    its bits before any cell of the run made it."""
    cells = root / "node" / "cells"
    cells.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chown", f"{NO_HOME_UID}:{NO_HOME_UID}", str(root / "node"), str(cells)], check=True)
    return cells


def _breaks_then_victim(root: Path, runner: str, folder: Path, **breaker: object) -> tuple[dict, list[dict], str]:
    """Run 1: the breaker's cell (its build, inspect or sanitize run taking FOLDER's bits). Run 2: the
    victim's. Returns the breaker's row, the victim's rows, and what the farm said."""
    first = _farm(root, "breaker", **breaker, runner=runner)  # type: ignore[arg-type]
    second = _farm(root, "victim", VICTIM, runner)
    said = "\n".join((first.stdout[-3000:], first.stderr[-2000:], second.stdout[-2000:], second.stderr[-2000:]))
    assert (root / "results.db").is_file(), said
    rows = _rows(root, "breaker")
    assert len(rows) == 1, (rows, said)
    return rows[0], _rows(root, "victim"), said


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_build_that_takes_the_bits_of_builds_is_caught_at_its_own_cell(node_home: Path, runner: str) -> None:
    """Before: the breaker's own binary could no longer be hashed under builds/ of mode 000: its build-fail
    "the build exited 0 but wrote no binary", the folder left so, and the victim's build could not make its
    folder (infra-error). Figure: the breaker's build-fail names builds/ and its mode 000 (set back), and
    the victim passes."""
    builds = node_home / "node" / "builds"
    build = f"{BUILD} && chmod 000 {builds}"
    row, victim, said = _breaks_then_victim(node_home, runner, builds, source=VICTIM, build=build)
    assert (row["outcome"], row["failed_stage"]) == ("build-fail", "build"), (row, said)
    assert f"mode 000 of {builds} (was" in row["reason"] and "set back" in row["reason"], row["reason"]
    assert builds.stat().st_mode & 0o700 == 0o700, oct(builds.stat().st_mode)
    assert [r["outcome"] for r in victim] == ["pass"], (victim, said)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_build_that_takes_the_bits_of_cells_is_blamed_and_they_are_set_back(node_home: Path, runner: str) -> None:
    """Before: the breaker's copy into cells/ failed (infra-error, the copy-failed words: no blame), cells/
    left mode 000, and the victim's copy failed too. Figure: the breaker's build-fail names cells/ and its
    mode 000, the victim passes, cells/ has its bits back."""
    cells = _cells(node_home)
    build = f"{BUILD} && chmod 000 {cells}"
    row, victim, said = _breaks_then_victim(node_home, runner, cells, source=VICTIM, build=build)
    assert (row["outcome"], row["failed_stage"]) == ("build-fail", "build"), (row, said)
    assert f"mode 000 of {cells} (was" in row["reason"], row["reason"]
    assert cells.stat().st_mode & 0o700 == 0o700, oct(cells.stat().st_mode)
    assert [r["outcome"] for r in victim] == ["pass"], (victim, said)


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_inspection_that_takes_the_bits_of_cells_is_blamed_and_they_are_set_back(
    node_home: Path, runner: str
) -> None:
    """Before: after an inspect command that took cells/'s bits the breaker's run found no copy
    (infra-error "binary altered"), and the victim's copy failed. Figure: the breaker's inspect-fail
    names cells/ and its mode 000, the victim passes."""
    cells = _cells(node_home)
    inspect = f"{INSPECT} && chmod 000 {cells}"
    row, victim, said = _breaks_then_victim(node_home, runner, cells, source=VICTIM, inspect=inspect)
    assert (row["outcome"], row["failed_stage"]) == ("inspect-fail", "inspect"), (row, said)
    assert f"mode 000 of {cells} (was" in row["reason"], row["reason"]
    assert cells.stat().st_mode & 0o700 == 0o700, oct(cells.stat().st_mode)
    assert [r["outcome"] for r in victim] == ["pass"], (victim, said)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_kernel_that_takes_the_bits_of_builds_under_the_sanitizer_is_no_pass(node_home: Path, runner: str) -> None:
    """Before: a kernel that took builds/'s bits only under compute-sanitizer passed (its run clean, its
    memcheck 0 errors), builds/ left mode 000, and the victim's build could not make its folder. Figure:
    the breaker's cell is a fail of its sanitize stage naming builds/ and its mode 000; the victim passes."""
    builds = node_home / "node" / "builds"
    source = UNDER_TOOL.replace("TARGET", str(builds))
    row, victim, said = _breaks_then_victim(node_home, runner, builds, source=source, sanitize=True)
    assert (row["outcome"], row["failed_stage"]) == ("fail", "sanitize"), (row, said)
    assert f"mode 000 of {builds} (was" in row["reason"], row["reason"]
    assert builds.stat().st_mode & 0o700 == 0o700, oct(builds.stat().st_mode)
    assert [r["outcome"] for r in victim] == ["pass"], (victim, said)


PASS = Expectation(Outcome.PASS, "a CC 7.5 card, contract CC >= 7.5", None, None)
COMPILE_ONLY = Expectation(Outcome.COMPILE_ONLY, "no GPU", None, None)


def _evidence(**changed: object) -> Evidence:
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=0, pass_line=1)
    for name, value in changed.items():
        setattr(ev, name, value)
    return ev


def test_the_stage_that_changed_the_folders_is_the_one_blamed() -> None:
    """Before: a change noted anywhere was the run's ("during the run", failed stage run), and a compile-only
    cell whose build took the folders' bits stayed green. Figure: the build's change is its build-fail,
    on a GPU node and a compile-only one; a build that failed anyway is no verdict (infra-error of the
    build)."""
    change = {"farm_folders_changed": "mode 000 of /w/cells (was 755; set back)", "farm_folders_stage": "build"}
    for exp, ran in ((PASS, {}), (COMPILE_ONLY, {"run_exit": None, "pass_line": None})):
        assert classify(_evidence(**ran), exp).outcome is exp.outcome  # unchanged, it is green
        verdict = classify(_evidence(**ran, **change), exp)
        assert (verdict.outcome, verdict.failed_stage) == (Outcome.BUILD_FAIL, "build"), verdict
        assert "during its build" in verdict.reason and "/w/cells" in verdict.reason, verdict.reason
    failed = classify(_evidence(build_exit=1, **change), PASS)
    assert (failed.outcome, failed.failed_stage) == (Outcome.INFRA_ERROR, "build"), failed
    assert "no verdict on the kernel" in failed.reason, failed.reason


def test_a_declared_known_failure_does_not_turn_a_folder_taker_green() -> None:
    """Before: a run that took the folders' bits was `fail`, and a job declaring `fail` a known failure
    on that card turned it known-failure (green). Figure: it stays fail."""
    from orchestrator.config.job_spec import KnownFailureSpec

    declared = KnownFailureSpec.model_validate(
        {"when": {"nvcc": ">=13.0"}, "outcome": "fail", "reason": "wrong numbers on T4"}
    )
    exp = Expectation(Outcome.PASS, "a CC 7.5 card", declared)
    change = {"farm_folders_changed": "mode 000 of /w/cells (was 755; set back)", "farm_folders_stage": "run"}
    verdict = classify(_evidence(**change), exp)
    assert verdict.outcome is Outcome.FAIL, verdict


def test_the_shells_modes_check_is_one_stat_each_side(tmp_path: Path) -> None:
    """Before: the shell noted each folder's mode with a `stat` of its own, and again after (14 programs
    per stage for 7 folders). Figure: one `stat` before and one after where nothing changed; a change is
    still found, set back and said, parents first."""
    top = tmp_path / "w"
    below = top / "cells"
    below.mkdir(parents=True)
    before, after = modes_sh([str(top), str(below), str(tmp_path / "gone")])
    script = f'{before}stat() {{ echo called >> {tmp_path}/calls; command stat "$@"; }}; {after}'
    quiet = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert quiet.stdout == "" and (tmp_path / "calls").read_text().count("called") == 1, quiet
    changed = f"{before}chmod 0 {below} {top}; {after}"
    said = subprocess.run(["sh", "-c", changed], capture_output=True, text=True, check=True).stdout
    assert said.splitlines() == [f"@@farm folder-mode 000 755 {top}", f"@@farm folder-mode 000 755 {below}"], said
    assert below.stat().st_mode & 0o777 == 0o755


def test_a_folder_noted_while_another_cells_code_held_its_bits_is_not_set_back_to_that(tmp_path: Path) -> None:
    """Before (this round's first cut, and round 247's run on a node of several GPUs): a stage that noted
    cells/ at mode 000 (another cell's kernel had just taken its bits) and found it 755 after (that
    cell's own check had mended it) "set it back" to 000 and said so: the node broken again, an innocent
    stage blamed (a flaky test_redteam247 under load showed it). Figure: neither runner notes a folder
    without its owner's bits, nor sets one back to that."""
    from orchestrator.run.node.farm_folders import folder_modes

    cells = tmp_path / "cells"
    cells.mkdir()
    cells.chmod(0)
    assert folder_modes([str(cells)]) == {}
    before, after = modes_sh([str(cells)])
    said = subprocess.run(["sh", "-c", f"{before}chmod 755 {cells}; {after}"], capture_output=True, text=True)
    assert said.stdout == "" and cells.stat().st_mode & 0o777 == 0o755, (said, oct(cells.stat().st_mode))
