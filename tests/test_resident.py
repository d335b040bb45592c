"""The resident runner (orchestrator/run/resident.py, noderunner.serve): one
python3 per node serving all of its cells, each cell in a child forked from it.

Run here through the local transport (a real process, real pipes), with the
runner's stages swapped for a plan's own Python, so that each test says exactly
what a cell does; the SSH nodes run the real stages (tests/test_round_trips.py,
test_verdicts.py, test_node_runner.py, each with the `resident` runner)."""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import CommandTimeout, SessionLost
from orchestrator.run import resident, runner_code
from orchestrator.transport.base import Deadline
from orchestrator.transport.local import LocalTransport

# the runner, whose run_plan runs the plan's "python" instead of a cell's stages
SOURCE = resident.RUNNER_SOURCE.replace(
    b'if __name__ == "__main__":',
    b'def run_plan(plan):\n    exec(plan["python"])\n    sys.stdout.flush()\n\n\nif __name__ == "__main__":',
)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(resident, "RUNNER_SOURCE", SOURCE)
    transport = LocalTransport("here", NodeSpec(transport="local"), "run0")
    opened: list[int] = []

    def open_transport(t) -> None:
        opened.append(1)
        t.open()

    import sys

    runner = resident.ResidentRunner(transport, sys.executable, open_transport)
    runner.opened = opened  # type: ignore[attr-defined]
    yield runner
    runner.close()


def plan(python: str, cell: str = "") -> bytes:
    return marshal.dumps({"python": python, "marker": {"FARM_CELL": cell} if cell else {}}, 4)


def gone(pid: int) -> bool:
    """Ended (or a zombie, killed, waiting for its parent), within 5 s."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def run(runner, python: str, seconds: float = 30.0, cell: str = "") -> tuple[int, bytes, str]:
    out = bytearray()
    result = runner.run(plan(python, cell), cell, Deadline(seconds), out.extend)
    return result.exit_code, bytes(out), result.stderr


def test_cells_run_side_by_side_on_one_runner_each_with_its_own_output(runner) -> None:
    """Two cells at once: each gets its own stdout (in order, whole), stderr and exit
    code, though both came on the runner's one stream; one process serves both."""
    results: dict[str, tuple[int, bytes, str]] = {}

    def cell(name: str, code: int) -> None:
        python = (
            "import os, sys, time\n"
            f"for i in range(200):\n    os.write(1, b'{name}%03d ' % i + b'x' * 1000 + b'\\n')\n"
            f"    time.sleep(0.001)\n"
            f"sys.stderr.write('{name} says bye'); sys.stderr.flush()\n"
            "os.write(1, str(os.getppid()).encode())\n"
            f"os._exit({code})\n"
        )
        results[name] = run(runner, python)

    threads = [threading.Thread(target=cell, args=(n, c)) for n, c in (("a", 0), ("b", 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    parents = set()
    for name, code in (("a", 0), ("b", 3)):
        exit_code, out, err = results[name]
        lines = out.split(b"\n")
        assert exit_code == code and err == f"{name} says bye"
        assert lines[:-1] == [b"%s%03d " % (name.encode(), i) + b"x" * 1000 for i in range(200)]
        parents.add(lines[-1])
    assert len(parents) == 1  # both children of the one runner
    assert runner.opened == [1]  # one start


def test_a_cell_past_its_deadline_is_killed_alone(runner, tmp_path: Path) -> None:
    """Its child is killed (with the cell's processes); the cell is a CommandTimeout;
    a cell beside it ends as it would have, on the same runner."""
    pid_file = tmp_path / "pid"
    slow = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    other: list[tuple[int, bytes, str]] = []
    beside = threading.Thread(target=lambda: other.append(run(runner, "import time; time.sleep(2); print('done')")))
    beside.start()
    with pytest.raises(CommandTimeout):
        run(runner, slow, seconds=1.0, cell="slow-cell")
    beside.join()
    assert other == [(0, b"done\n", "")]
    assert gone(int(pid_file.read_text()))
    assert run(runner, "print('still serving')")[:2] == (0, b"still serving\n")


def test_a_runner_that_dies_loses_its_cells_and_the_next_cell_starts_another(runner) -> None:
    """Killed (by a kernel of the same user, say) while a cell is in flight: that
    cell is a SessionLost (infra, retried), and the next cell gets a new runner."""
    first = run(runner, "import os; print(os.getppid())")[1]
    with pytest.raises(SessionLost, match="its resident runner ended"):
        run(runner, "import os, signal, time; os.kill(os.getppid(), signal.SIGKILL); time.sleep(30)")
    second = run(runner, "import os; print(os.getppid())")[1]
    assert first != second


def test_what_another_process_writes_into_the_runners_stream_reaches_no_cell(runner) -> None:
    """A process of the same user writes into the runner's stdout: junk, and messages
    shaped like the runner's for the cell (without the runner's secret mark). None of
    it reaches the cell, whose own output comes whole; the runner serves on."""
    forge = (
        "import os\n"
        "with open(f'/proc/{os.getppid()}/fd/1', 'wb') as channel:\n"
        "    channel.write(b'#' * 5000 + b'\\n')\n"
        "    channel.write(b'o 1 6\\nforged')\n"
        "    channel.write(b'0' * 32 + b' o 1 6\\nforged')\n"
        "    channel.write(b'0' * 32 + b' x 1 0\\n')\n"
        "os.write(1, b'mine')\n"
        "os._exit(5)\n"
    )
    assert run(runner, forge) == (5, b"mine", "")
    assert run(runner, "import os; os.write(1, b'next')") == (0, b"next", "")


@pytest.mark.parametrize("header", [b" what", b" o 1 -5"])
def test_a_broken_stream_of_the_runners_own_kills_it_and_what_is_left_of_its_cells(
    runner, tmp_path: Path, header: bytes
) -> None:
    """A message with the runner's mark that the farm cannot read (the runner's own
    stream broken: a bug, or its mark leaked): the farm reads no further, kills the
    runner, its children and their cells' processes, then tells each cell it was
    serving (infra, retried: no retry runs beside what is left of it)."""
    pid_file = tmp_path / "pid"
    broken = (
        "import os, sys, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "mark = sys.modules['__main__'].STREAM_MARK.encode()\n"
        "os.write(sys.__stdout__.fileno(), b'')\n"
        "with open(f'/proc/{os.getppid()}/fd/1', 'wb') as channel:\n"
        f"    channel.write(mark + {header!r} + b'\\n')\n"
        "time.sleep(30)\n"
    )
    with pytest.raises(SessionLost, match="it sent what the farm cannot read"):
        run(runner, broken, cell="broken")
    assert gone(int(pid_file.read_text()))
    assert run(runner, "import os; os.write(1, b'again')") == (0, b"again", "")


def test_a_child_that_dies_has_its_cells_processes_reaped(runner, tmp_path: Path) -> None:
    """A cell's child killed (the kernel killed its runner): its exit code is the
    signal's, and the processes carrying its marker are killed, as the login's
    shell does for a runner of its own."""
    pid_file = tmp_path / "pid"
    python = (
        "import os, subprocess, signal\n"
        "env = dict(os.environ, FARM_CELL='reaped-cell')\n"
        "p = subprocess.Popen(['sleep', '77'], env=env, start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    code, out, _ = run(runner, python, cell="reaped-cell")
    assert code == 128 + signal.SIGKILL
    assert b"@@farm reaped 1" in out
    assert gone(int(pid_file.read_text()))


def test_an_idle_runner_the_farm_no_longer_speaks_to_ends_and_one_it_hears_stays(runner, monkeypatch) -> None:
    """The farm says `h` every HEARTBEAT seconds; a runner with no cell in flight that
    has not heard it for IDLE_LIMIT seconds ends (a connection cut without a reset
    would leave it, and sshd, waiting for hours). The next cell starts another."""
    monkeypatch.setattr(resident, "IDLE_LIMIT", 1.0)
    monkeypatch.setattr(resident, "HEARTBEAT", 0.2)
    server = int(run(runner, "import os; os.write(1, str(os.getppid()).encode())")[1])
    time.sleep(2.5)  # idle, but heard
    assert int(run(runner, "import os; os.write(1, str(os.getppid()).encode())")[1]) == server
    monkeypatch.setattr(resident, "HEARTBEAT", 60.0)  # the farm falls silent
    time.sleep(0.5)
    assert gone(server)
    assert int(run(runner, "import os; os.write(1, str(os.getppid()).encode())")[1]) != server


def test_a_runner_with_cells_says_it_is_there_and_one_that_falls_silent_is_given_up(runner, monkeypatch) -> None:
    """A cell's stages no longer each send their start to move the farm's deadline
    on (one message per cell, not three): the farm allows the stages' sum, and finds
    a frozen or cut-off node by its silence instead. A runner with cells in flight
    says `b` when it has said nothing for BEAT s, so a quiet cell longer than
    SILENT_LIMIT ends as it would have; a runner that stops (SIGSTOP, as a frozen
    node's sshd) has its cell given up on after SILENT_LIMIT s, not its deadline."""
    monkeypatch.setattr(resident, "BEAT", 0.2)
    monkeypatch.setattr(resident, "SILENT_LIMIT", 1.0)
    assert run(runner, "import time; time.sleep(3); print('quiet, and done')") == (0, b"quiet, and done\n", "")

    stopped: list[int] = []

    def stop_its_runner(chunk: bytes) -> None:
        if not stopped:
            stopped.append(int(chunk.split()[0]))
            os.kill(stopped[0], signal.SIGSTOP)

    clock = time.monotonic()
    try:
        with pytest.raises(CommandTimeout, match="said nothing for"):
            python = "import os, time; os.write(1, b'%d\\n' % os.getppid()); time.sleep(30)"
            runner.run(plan(python, "frozen-cell"), "frozen-cell", Deadline(60.0), stop_its_runner)
        took = time.monotonic() - clock
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):  # killed as lost, as it should be (below)
                os.kill(pid, signal.SIGCONT)
    assert stopped and took < 10, f"given up after {took:.1f} s"

    def gone() -> bool:  # no process, or a zombie its parent has yet to reap
        try:
            return Path(f"/proc/{stopped[0]}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    # the silent runner is taken for lost and killed (its next cells start another): its retries
    # went to it again, each waiting out the silence (a red-team finding)
    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(), "the silent runner was left running"


def test_a_cells_stdout_is_held_to_go_in_fewer_messages_but_its_run_start_goes_at_once(runner) -> None:
    """Each message from the node costs the farm CPU, and a cell's stages write their
    starts as they begin: the runner holds a cell's stdout for up to HOLD s, to send
    it with what follows in one message (its end, `x`, included). The run stage's
    start goes at once: an infra failure names the stage it was heard at, and the
    kernel's is where nodes fail. Nothing is held longer than HOLD."""
    from orchestrator.run import noderunner

    def arrivals(python: str) -> list[tuple[float, bytes]]:
        got: list[tuple[float, bytes]] = []
        clock = time.monotonic()
        runner.run(plan(python), "", Deadline(30.0), lambda chunk: got.append((time.monotonic() - clock, chunk)))
        return got

    held = arrivals(
        "import os, time\nos.write(1, b'build\\n'); time.sleep(0.1); os.write(1, b'inspect\\n')\n"
        "time.sleep(2); os.write(1, b'end\\n')"
    )
    assert [chunk for _, chunk in held] == [b"build\ninspect\n", b"end\n"]
    assert held[0][0] < noderunner.HOLD + 1.0 < held[1][0]  # released after HOLD, not at the end
    run_start = arrivals(
        "import os, time\nos.write(1, b'build\\n'); time.sleep(0.1)\n"
        "os.write(1, b'@@farm section run 1\\n'); time.sleep(2)"
    )
    assert [chunk for _, chunk in run_start] == [b"build\n@@farm section run 1\n"]
    assert run_start[0][0] < noderunner.HOLD  # at once, not held


def test_a_closed_runner_leaves_no_thread_of_its_own(runner) -> None:
    """Its reader and its heartbeat end with it: a thread left sleeping would keep the
    next run's workers from being forked (workers.start_method)."""
    assert run(runner, "import os; os.write(1, b'one')") == (0, b"one", "")
    mine = [t for t in threading.enumerate() if t.name.startswith("here-resident")]
    assert {t.name for t in mine} == {"here-resident-reader", "here-resident-beat"}
    runner.close()
    for thread in mine:
        thread.join(5)
    assert not [t.name for t in mine if t.is_alive()]


def test_a_local_process_says_its_stderr_after_it_was_closed() -> None:
    """A runner's reader tells its loss with what the runner wrote to stderr, which may
    be after the farm closed it: reading a closed file printed a traceback from the
    reader's thread (a local node declaring a GPU it lacks; found by an adversarial
    review). What it said is kept."""
    from orchestrator.config.farm_spec import NodeSpec
    from orchestrator.transport import transport_for

    with transport_for("here", NodeSpec(transport="local")) as transport:
        process = transport.start("echo gone >&2")
        time.sleep(0.5)
        process.close()
        assert process.stderr().strip() == "gone"


def test_the_runner_is_compiled_once_however_many_nodes_start_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every node's thread asks for the compiled runner as it starts: unguarded, 3-5 of them
    compiled it at once (26 ms each), per worker process too."""
    calls: list[int] = []
    monkeypatch.setattr(runner_code, "CACHE_DIR", tmp_path)  # nothing kept from before: it must compile

    def slow_compile(*args: object, **kwargs: object) -> object:
        calls.append(1)
        time.sleep(0.05)  # the race's window, made certain
        return compile(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(runner_code, "compile", slow_compile, raising=False)
    source = f"x = 1  # {time.monotonic_ns()}\n".encode()
    start = threading.Barrier(8)

    def node() -> None:
        start.wait()
        assert marshal.loads(resident.compiled(source)) is not None

    threads = [threading.Thread(target=node) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
