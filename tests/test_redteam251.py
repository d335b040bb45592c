"""Red-team round 251: a build or an inspection that leaves a detached process behind to take the bits of the
farm's own folders later.

Broke (before/after): round 249 noted and set back the modes of the farm's folders around each stage's
command, and the python runner kills what a build or an inspection left (kill_orphans, as its subreaper)
before that check; the shell runner's build and inspect stages killed only the command's process group. A
build that started a detached daemon (`setsid sh -c 'sleep 1; chmod 000 cells' &`) outlived its stage's
check: its chmod landed after it, in a later stage (that stage blamed: the breaker's own run failed) or,
where no later stage reaped the cell's processes (a compile-only cell), after the cell.
Now the shell runner's build and inspect stages reap the cell's processes (its FARM_CELL marker, which a
daemon's setsid keeps) before their check, as its run and sanitize stages did.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import test_redteam244
from test_redteam244 import BUILD, VICTIM, _rows
from test_redteam249 import INSPECT, RUNNERS, _cells, _farm

node_home = test_redteam244.node_home  # its fixture, by its name

LATER = 1  # seconds: the daemon's sleep, past its stage, within the breaker's slow run

# a kernel that passes after SLOW seconds: the daemon strikes during its run (whose end reaps the cell's processes)
SLOW = 4
SLEEPER = """\
#include <cstdio>
#include <unistd.h>
int main() { sleep(SLOW); std::printf("toy: PASS\\n"); return 0; }
""".replace("SLOW", str(SLOW))


def _daemon(folder: Path) -> str:
    """Shell leaving a detached process (its own session: no process group of the stage's) that takes
    FOLDER's bits LATER seconds on."""
    return f'( setsid sh -c "sleep {LATER}; chmod 000 {folder}" > /dev/null 2>&1 < /dev/null & )'


def _left_behind(root: Path, runner: str, **breaker: str) -> tuple[dict, list[dict], str, int]:
    """Run the breaker's cell, wait until its daemon would have struck, then the victim's; returns the
    breaker's row, the victim's rows, what the farm said, and cells/'s mode between the two runs."""
    cells = _cells(root)
    first = _farm(root, "breaker", SLEEPER, runner, **breaker)
    time.sleep(LATER)
    mode = cells.stat().st_mode & 0o777
    cells.chmod(0o755)  # the victim's run shows what the breaker's cell did not, not this test's leftover
    second = _farm(root, "victim", VICTIM, runner)
    said = "\n".join((first.stdout[-3000:], first.stderr[-2000:], second.stdout[-2000:], second.stderr[-2000:]))
    rows = _rows(root, "breaker")
    assert len(rows) == 1, (rows, said)
    return rows[0], _rows(root, "victim"), said, mode


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_builds_detached_daemon_is_killed_before_it_takes_the_folders_bits(node_home: Path, runner: str) -> None:
    """Before (shell runner): the build's daemon outlived the build's folder check and took cells/'s bits
    during the breaker's run: the run blamed (`fail` of its run stage, naming cells/). Figure:
    on either runner the daemon is killed with the build, cells/ keeps its bits, and the breaker (whose
    build broke nothing) and the victim pass."""
    cells = node_home / "node" / "cells"
    row, victim, said, mode = _left_behind(node_home, runner, build=f"{BUILD} && {_daemon(cells)}")
    assert mode & 0o700 == 0o700, (oct(mode), said)
    assert row["outcome"] == "pass", (row, said)
    assert [r["outcome"] for r in victim] == ["pass"], (victim, said)


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_inspections_detached_daemon_is_killed_before_it_takes_the_folders_bits(
    node_home: Path, runner: str
) -> None:
    """Before (shell runner): the inspect command's daemon outlived the inspection's folder check and took
    cells/'s bits during the run: the run blamed. Figure: it is killed with the inspection, cells/
    keeps its bits, and both cells pass."""
    cells = node_home / "node" / "cells"
    row, victim, said, mode = _left_behind(node_home, runner, inspect=f"{INSPECT} && {_daemon(cells)}")
    assert mode & 0o700 == 0o700, (oct(mode), said)
    assert row["outcome"] == "pass", (row, said)
    assert [r["outcome"] for r in victim] == ["pass"], (victim, said)


class _Said:
    """The python runner's `out` (node/stages.py): what its stage said, line by line."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        self.lines.append(line)


def test_a_stage_another_cells_check_mended_during_says_so_on_either_runner(tmp_path: Path) -> None:
    """Before: the breaker's stage (cell b) took cells/'s bits while an innocent stage (cell a) overlapped it;
    a's check mended them first (a blamed), and b's own check, finding cells/ as it noted it, said nothing:
    b passed. Figure: the mend is logged in the node's work folder, and b's check (either runner's) says
    a's set-back as `@@farm folder-mode-other a 000 755 CELLS`; a's own lines it does not repeat."""
    from orchestrator.run.node.farm_folders import folder_modes, log_mark, modes_restored
    from orchestrator.run.work_folder import modes_sh

    top = tmp_path / "w"
    cells = top / "cells"
    cells.mkdir(parents=True)
    folders = [str(top), str(cells)]
    a_before, a_after = modes_sh(folders, "a")
    b_before, b_after = modes_sh(folders, "b")
    script = f"{a_before}{{ {b_before}chmod 0 {cells}; ( {a_after} ) > a.txt; {b_after} }}"
    said = subprocess.run(["sh", "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert (tmp_path / "a.txt").read_text().splitlines() == [f"@@farm folder-mode 000 755 {cells}"]
    assert said.stdout.splitlines() == [f"@@farm folder-mode-other a 000 755 {cells}"], said
    assert said.stderr == "", said.stderr
    # the python runner's, with the shell's log as it is (one node: either runner's stages may overlap)
    a_modes, a_mark = folder_modes(folders), log_mark(folders)
    b_modes, b_mark = folder_modes(folders), log_mark(folders)
    cells.chmod(0)
    a_out, b_out = _Said(), _Said()
    modes_restored(a_out, a_modes, a_mark, "a")
    modes_restored(b_out, b_modes, b_mark, "b")
    assert a_out.lines == [f"@@farm folder-mode 000 755 {cells}"], a_out.lines
    assert b_out.lines == [f"@@farm folder-mode-other a 000 755 {cells}"], b_out.lines
    assert cells.stat().st_mode & 0o777 == 0o755


def test_a_cell_whose_stage_overlapped_another_cells_mend_is_no_pass() -> None:
    """Before: a cell whose run saw another cell's stage set back the farm's folders passed (nothing of its
    own changed). Figure: its text's folder-mode-other line is noted, and the cell is infra-error of that
    stage naming the folder; a later stage's failure stands, saying it."""
    from orchestrator.classify import Evidence, classify
    from orchestrator.outcomes import Outcome
    from orchestrator.plan import Expectation
    from orchestrator.run.work_folder import note_folders

    exp = Expectation(Outcome.PASS, "a CC 7.5 card, contract CC >= 7.5", None, None)
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=0, pass_line=1)
    assert classify(ev, exp).outcome is Outcome.PASS
    note_folders(ev, "inspect", "@@farm rc=0\n@@farm folder-mode-other tok.7 000 755 /w/cells\n")
    verdict = classify(ev, exp)
    assert (verdict.outcome, verdict.failed_stage) == (Outcome.INFRA_ERROR, "inspect"), verdict
    assert "/w/cells" in verdict.reason and "set back by cell tok.7" in verdict.reason, verdict.reason
    assert ev.farm_folders_changed == "", ev  # it changed nothing itself: not blamed
    ev.run_exit, ev.pass_line = 1, None
    later = classify(ev, exp)
    assert (later.outcome, later.failed_stage) == (Outcome.FAIL, "run"), later
    assert "mended the modes of mode 000 of /w/cells" in later.reason, later.reason
