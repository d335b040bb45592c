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
