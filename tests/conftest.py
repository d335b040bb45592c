"""Fixtures for end-to-end tests over real OpenSSH sshd processes on loopback.

`ssh_fleet` starts, once per session, one sshd per test node, each with its own
host key, client key, known_hosts and PATH (see tests/nodes.py):

    t4, a100, h100   an nvidia-smi stand-in for that card on PATH
    nogpu            no nvidia-smi at all (compile-only)
    down             prepared, started, then stopped: nothing listens on its port

`make_farm` writes a farm folder (farm.yaml, jobs/, kernels/) for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, missing_tools, write_farm


@pytest.fixture(scope="session")
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"the loopback sshd fleet needs {', '.join(missing)}")
    fleet = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        for name in ("t4", "a100", "h100"):
            fleet.add(name, CARDS[name])
        fleet.add("nogpu", None)
        fleet.add("down", CARDS["a100"]).stop()
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture(scope="session")
def make_farm() -> Callable[..., Path]:
    """write_farm(root, nodes, jobs, **farm_keys) -> path of farm.yaml."""
    return write_farm
