"""Red-team 162: a cell's kills returned before what they killed had ended. Only kill_orphans waited
for its SIGKILLs; the FARM_CELL reap (the python runner's and the shell's), and the last kill of the
command's process group (the shell's `timeout` fragment and the runner's `guarded`) killed and
returned: a process that got the signal but had not yet exited (a CUDA context's teardown takes a
while) was still there when the cell was declared ended and the next cell took the GPU's lock.
Each of them now waits (bounded) for what it killed, and one that outlives the bound is said as
`@@farm undying PID CMD`: the cell is infra-error, never a verdict on the kernel."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from orchestrator.errors import InfraError
from orchestrator.run import commands, noderunner
from orchestrator.run.stages.run import undying_error
from orchestrator.transport.base import ended_sh, reap
from tests.nodes import own_sleep

COUNT = 24  # victims killed at once: on two busy cores the last few have not run their exit yet


def running(pids: list[int]) -> list[int]:
    """Those of PIDS that are still a process that has not exited (not gone, not a zombie)."""
    left = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                state = handle.read().rpartition(b")")[2].split()[0]
        except OSError:
            continue
        if state != b"Z":
            left.append(pid)
    return left


@pytest.fixture
def load():
    """Every core busy meanwhile (at the lowest priority): a killed process waits its turn to exit."""
    busy = [
        subprocess.Popen(["nice", "-n", "19", "sh", "-c", "while :; do :; done"])
        for _ in range(2 * (os.cpu_count() or 1))
    ]
    yield
    for child in busy:
        child.kill()
        child.wait()


@pytest.fixture
def marked(load):
    """COUNT sleeps, each in a session of its own (escaped from any group) and carrying a fresh
    FARM_CELL marker: (the marker, their pids). Killed and collected whatever the test did."""
    cell = uuid.uuid4().hex
    env = dict(os.environ, FARM_CELL=cell)
    children = [subprocess.Popen(own_sleep(60).split(), env=env, start_new_session=True) for _ in range(COUNT)]
    time.sleep(0.2)  # each has exec'd sleep and is asleep: a kill now wakes it to exit
    yield cell, [child.pid for child in children]
    for child in children:
        child.kill()
        child.wait()


def test_the_runners_marker_reap_returns_once_what_it_killed_has_ended(marked):
    cell, pids = marked
    assert noderunner.reap("FARM_CELL", cell) == COUNT
    assert running(pids) == []  # at once, no polling: the cell's end is after theirs
    assert noderunner.undying() == []


def test_the_shells_marker_reap_returns_once_what_it_killed_has_ended(marked):
    cell, pids = marked
    # checked by the same shell, the moment the reap's fragment is done
    check = "; ".join(
        f'if read -r s < /proc/{pid}/stat 2>/dev/null; then s=${{s##*) }}; echo "{pid} ${{s%% *}}"; fi' for pid in pids
    )
    out = subprocess.run(["sh", "-c", f"{reap('FARM_CELL', cell)}; {check}"], capture_output=True, text=True).stdout
    assert f"@@farm leftover {COUNT}" in out
    states = [line.split() for line in out.splitlines() if not line.startswith("@@farm")]
    assert [pid for pid, state in states if state != "Z"] == []
    assert "@@farm undying" not in out


def group_of_sleeps(needle: str) -> str:
    """A command that leaves COUNT sleeps in its process group and exits at once."""
    return f"for i in {' '.join(['x'] * COUNT)}; do {needle} & done; exit 0"


def live_in_group(pgid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    fields = handle.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != b"Z":
                found.append(int(name))
    return found


def test_the_runners_group_kill_returns_once_the_group_has_ended(tmp_path, monkeypatch, load):
    seen = []
    real = noderunner.spawn

    def spawned(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(noderunner, "spawn", spawned)
    with open(tmp_path / "out", "wb") as out:
        code = noderunner.guarded(
            group_of_sleeps(own_sleep(60)), 20, str(tmp_path), out.fileno(), out.fileno(), os.environ
        )
    left = live_in_group(seen[0])
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert code == 0
    assert left == []
    assert noderunner.undying() == []


def test_the_shells_group_kill_returns_once_the_group_has_ended(load):
    # the shell's own pid of the group ($pid) is the group's: every member is looked for by it at once
    look = (
        'for f in /proc/[0-9]*/stat; do read -r s < "$f" 2>/dev/null || continue; s=${s##*) }; '
        'set -- $s; [ "$3" = "$pid" ] && [ "$1" != Z ] && echo "alive ${f#/proc/}"; done'
    )
    fragment = commands.guarded(group_of_sleeps(own_sleep(60)), 20, "> /dev/null 2>&1 < /dev/null")
    out = subprocess.run(["sh", "-c", f"{fragment}; echo rc=$rc; {look}"], capture_output=True, text=True).stdout
    alive = [line for line in out.splitlines() if line.startswith("alive")]
    for line in alive:
        os.kill(int(line.split()[1].split("/")[0]), signal.SIGKILL)
    assert "rc=0" in out
    assert alive == []
    assert "@@farm undying" not in out


def test_the_wait_counts_a_zombie_as_ended_and_reports_a_survivor_with_its_command():
    dead = subprocess.Popen(own_sleep(60).split())
    needle = own_sleep(60)
    alive = subprocess.Popen(needle.split())
    try:
        os.kill(dead.pid, signal.SIGKILL)  # never collected here until the end: a zombie meanwhile
        began = time.monotonic()
        assert noderunner.wait_gone([dead.pid], 5) == []
        assert time.monotonic() - began < 1
        began = time.monotonic()
        assert noderunner.wait_gone([], 5) == []  # nothing killed: no wait at all
        assert time.monotonic() - began < 0.01
        # one that does not end (here: never signalled) is reported once the bound is over
        began = time.monotonic()
        survivors = noderunner.wait_gone([alive.pid, dead.pid], 0.3)
        assert 0.3 <= time.monotonic() - began < 2
        assert survivors == [f"{alive.pid} {needle}"]
        assert noderunner.undying() == [f"{alive.pid} {needle}"]
        assert noderunner.undying() == []  # said once
    finally:
        alive.kill()
        alive.wait()
        dead.wait()


def test_the_shells_wait_reports_a_survivor_with_its_command_and_passes_a_zombie():
    dead = subprocess.Popen(own_sleep(60).split())
    needle = own_sleep(60)
    alive = subprocess.Popen(needle.split())
    try:
        os.kill(dead.pid, signal.SIGKILL)  # a zombie until the end: ended
        began = time.monotonic()
        out = subprocess.run(["sh", "-c", ended_sh(str(dead.pid))], capture_output=True, text=True).stdout
        assert out == ""
        assert time.monotonic() - began < 1
        began = time.monotonic()
        out = subprocess.run(
            ["sh", "-c", ended_sh(f"'{alive.pid} {dead.pid}'", 0.3)], capture_output=True, text=True
        ).stdout
        assert time.monotonic() - began >= 0.3
        assert out == f"@@farm undying {alive.pid} {needle}\n"
    finally:
        alive.kill()
        alive.wait()
        dead.wait()


def test_a_process_that_would_not_die_makes_the_run_infra_error():
    text = "@@farm leftover 1\n@@farm undying 4242 /usr/bin/kernel --x\n@@farm checked abc\n@@farm 0\n"
    with pytest.raises(InfraError, match=r"a process of the cell would not die: 4242 /usr/bin/kernel --x"):
        undying_error("n1", text)
    undying_error("n1", "@@farm leftover 3\n@@farm 0\n")  # killed and gone: no error


def test_a_sanitizer_tools_process_that_would_not_die_is_said_and_makes_the_stage_infra_error(tmp_path, monkeypatch):
    """The sanitize stage reaped its tools' leftovers and waited, but never said what outlived the
    wait (the run stage did): a tool's process still holding the GPU left the cell's sanitize verdict
    standing. Now said as the run stage says it, and read by the farm's sanitize stage alike."""
    from test_redteam159 import _sanitize_in_process

    def stuck_reap(variable: str, value: str) -> int:
        noderunner.UNDYING.append("4242 compute-sanitizer --tool memcheck ./kernel")
        return 1

    monkeypatch.setattr(noderunner, "reap", stuck_reap)
    text = _sanitize_in_process(tmp_path, "true", 10)
    assert "@@farm undying 4242 compute-sanitizer --tool memcheck ./kernel" in text, text
    assert noderunner.undying() == []  # said once, not again by the next cell
    with pytest.raises(InfraError, match="would not die: 4242 compute-sanitizer"):
        undying_error("n1", text)
    sanitize_stage = (Path(__file__).parent.parent / "orchestrator/run/stages/sanitize.py").read_text()
    assert "undying_error(self.t.name, text, " in sanitize_stage  # its forgeable flag since round 271
