"""Fixtures for end-to-end tests over real OpenSSH sshd processes on loopback.

`ssh_fleet` starts, once per session, one sshd per test node, each with its own
host key, client key, known_hosts and PATH (see tests/nodes.py):

    t4, a100, h100   an nvidia-smi stand-in for that card on PATH
    nogpu            no nvidia-smi at all (compile-only)
    down             prepared, started, then stopped: nothing listens on its port
    frozen           started, then SIGSTOPped: it accepts TCP but never says a word

`make_farm` writes a farm folder (farm.yaml, jobs/, kernels/) for them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nodes import CARDS, LOOPBACK, Fleet, missing_tools, write_farm


@pytest.fixture(scope="session")
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"the loopback sshd fleet needs {', '.join(missing)}")
    fleet = Fleet(tmp_path_factory.mktemp("fleet"))
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        for name in ("t4", "a100", "h100"):
            fleet.add(name, CARDS[name])
        fleet.add("nogpu", None)
        down = fleet.add("down", CARDS["a100"])
        down.stop()
        # its port kept, bound and not listening (a connection to it is refused): left free, another
        # test's sshd took it once in CI ("the stopped node's port must have no sshd", session 43)
        with contextlib.suppress(OSError):  # taken already: as before, free
            holder.bind((LOOPBACK, down.port))
        fleet.add("frozen", CARDS["a100"]).freeze()
        yield fleet
    finally:
        holder.close()
        fleet.stop()


@pytest.fixture(params=["resident", "cell", "shell"])
def runner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test using it runs with each node runner: the node's resident python3
    running all of its cells (farm.yaml's `auto` on these nodes, which all have
    python3: resident.py), a python3 per cell (`cell`), and the POSIX shell scripts
    that nodes without python3 get (`shell`)."""
    monkeypatch.setenv("FARM_TEST_RUNNER", "auto" if request.param == "resident" else request.param)
    return request.param


@pytest.fixture(autouse=True)
def signal_mask_kept() -> Iterator[None]:
    """A test that runs the node runner's code in the test process (run_plan blocks SIGCHLD, as
    its own process needs) left the worker's SIGCHLD blocked: every later process it started
    inherited the mask, and dash's `wait` in a later test's shell never woke (a CI run hung in
    test_review141, another in test_review119). Set back after each test, and that test fails."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = signal.pthread_sigmask(signal.SIG_SETMASK, before)
    assert after == before, f"the test left signals {sorted(after - before)} blocked in the test process"


@pytest.fixture(scope="session")
def make_farm() -> Callable[..., Path]:
    """write_farm(root, nodes, jobs, **farm_keys) -> path of farm.yaml."""
    return write_farm


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """In CI only tests marked `gpu` may skip: any other skip fails the run,
    so a missing sshd (say) can never turn into a silently green CI."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and item.get_closest_marker("gpu") is None:
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where only tests marked gpu may skip: {report.longrepr}"
        if hasattr(report, "wasxfail"):
            # an expected failure (xfail) counts as one that did not run: pytest counts no failed
            # report that carries wasxfail, and CI exited 0 with "1 failed" in its summary
            del report.wasxfail
