"""Review round 168: node-side process tracking (one /proc/*/stat reader) and a farm started with
the signals it relies on blocked in its inherited mask.

- A farm whose parent had blocked SIGCHLD (as a pytest worker had, tests/conftest.py's
  signal_mask_kept, commit 2a96367) inherits the mask across exec and passes it to every process it
  starts: a local node's stage shells then waited forever (dash's `wait` sleeps for a SIGCHLD that
  never comes), and the cell ended infra-error at its stage's timeout. The CLI's entry now unblocks
  SIGCHLD, SIGTERM, SIGINT, SIGHUP and SIGALRM (cli/base.py, unblock_farm_signals).
- A farm started with SIGTERM blocked was not stopped by one (`systemctl stop`, a cron's kill): the
  run went on to its end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from farm_cli import farm_argv, farm_env
from nodes import own_sleep, processes_matching
from toyfarm import toy_farm

from orchestrator.run import noderunner  # the node runner's one namespace, as it runs on a node

# a python that blocks the signals named in argv[1] (comma separated numbers), then execs the rest: the
# parent that started the farm with them blocked
BLOCKING = (
    "import os, signal, sys; "
    "signal.pthread_sigmask(signal.SIG_BLOCK, [int(n) for n in sys.argv[1].split(',')]); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def _blocked(*signals: int) -> list[str]:
    return [sys.executable, "-c", BLOCKING, ",".join(str(int(s)) for s in signals)]


def _shell_toy(root: Path, build_prefix: str = "") -> Path:
    """The toy farm on a local node run by the shell runner (its stages are `sh -c` scripts that
    `wait` for what they start); BUILD_PREFIX goes before the variant's g++."""
    config = toy_farm(root)
    config.write_text(config.read_text() + "    runner: shell\n")
    if build_prefix:
        job = root / "jobs" / "toy.yaml"
        job.write_text(job.read_text().replace("build: 'g++", f"build: '{build_prefix}g++"))
    return config


def _kill_left(*needles: str) -> None:
    """What a farm killed by the test left running (its stage shells lead their own groups)."""
    for needle in needles:
        for pid, _ in processes_matching(needle):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_farm_started_with_sigchld_blocked_still_runs_its_shell_stages(tmp_path: Path) -> None:
    """Before: the cell's build shell never woke from its `wait`: the run hung, then said infra-error
    ("the cell's command never said which stages it ran") at its stage's timeout, ~36 s, exit 4.
    Figure: compile-only and exit 0 in a few seconds, as with nothing blocked."""
    config = _shell_toy(tmp_path)
    argv = [*_blocked(signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP), *farm_argv()]
    argv += ["verify", "--all", "--no-report", "--config", str(config)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=farm_env(), cwd=tmp_path, timeout=30)
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(f"the farm hung with SIGCHLD blocked: {hung.stdout!r}") from None
    finally:
        _kill_left(str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compile-only" in done.stdout and "exit 0 (every cell as expected)" in done.stdout, done.stdout


def test_a_farm_started_with_sigterm_blocked_is_still_stopped_by_one(tmp_path: Path) -> None:
    """Before: the SIGTERM stayed pending; the run built on (a 30 s build) and exited 0, as if nobody
    had asked it to stop. Figure: stopped within seconds, exit 4, "stopped by SIGTERM"."""
    sleep = own_sleep(30)
    config = _shell_toy(tmp_path, sleep + " && ")
    argv = [*_blocked(signal.SIGTERM), *farm_argv("verify", "--all", "--no-report", "--config", str(config))]
    farm = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=farm_env(), cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 20
        while not processes_matching(sleep):
            assert time.monotonic() < deadline and farm.poll() is None, "the build never started"
            time.sleep(0.1)
        farm.send_signal(signal.SIGTERM)
        try:
            out, _ = farm.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            raise AssertionError("a SIGTERM did not stop a farm started with SIGTERM blocked") from None
    finally:
        farm.kill()
        farm.wait()
        _kill_left(str(tmp_path), sleep)
    assert farm.returncode == 4, out
    assert "stopped by SIGTERM" in out, out


def test_the_one_stat_reader_takes_a_command_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    """Before: the same (no finding; a guard for the refactor): group_members and kill_orphans each
    scanned /proc/*/stat, now both through ended.proc_stats. Figure: a process that names itself
    ") Z 1 1 (" (prctl) is read by the fields after the LAST ')': not a zombie, its own parent and
    group; a split at the first ')' read it as a zombie child of init, left out of its group."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import ctypes, os, sys; ctypes.CDLL(None).prctl(15, b') Z 1 1 (', 0, 0, 0); "
            "os.setpgid(0, 0); sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert Path(f"/proc/{child.pid}/comm").read_text() == ") Z 1 1 (\n"
        state, parent, group = noderunner.proc_stats()[child.pid]
        assert state != b"Z" and parent == os.getpid() and group == child.pid, (state, parent, group)
        assert noderunner.group_members(child.pid) == [child.pid]
    finally:
        child.kill()
        child.wait()


def test_a_node_back_without_its_control_device_says_what_changed() -> None:
    """Before: "another NVIDIA driver (NVRM version: X at its probe, NVRM version: X now)", the one
    line twice. Figure: the control device named as what changed."""
    from orchestrator.run.driver_check import driver_changed

    line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 2025"
    said = driver_changed(f"{line}\n/dev/nvidiactl\n", f"{line}\n")
    assert "/dev/nvidiactl gone" in said and said.count("580.95.05") == 1, said
    assert driver_changed(f"{line}\n/dev/nvidiactl\n", f"{line}\n/dev/nvidiactl\n") == ""
    other = driver_changed(f"{line}\n/dev/nvidiactl\n", f"{line.replace('580.95.05', '570.1')}\n/dev/nvidiactl\n")
    assert "another NVIDIA driver" in other and "570.1" in other, other
