"""Which node of the run has each GPU, by its UUID: one card runs under one node name.

farm.yaml may list one machine twice (two names for one sshd, a name and its IP address,
two ports of one sshd), each entry with its own work folder and so its own GPU lock files:
each name's cells then ran on the one card at once, and the matrix showed two independent
certifications of one card. The probe reads every card's UUID; the first node of the run to
claim a card keeps it, and another name's cells never run on it. The toolchain columns of
one farm.yaml node (NODE+TOOLCHAIN) share their machine's cards on purpose (their runs
queue together: scheduler.py's machine slots) and claim as that node."""

from __future__ import annotations

import threading
from typing import Any

from orchestrator.config.farm_spec import TOOLCHAIN_SEP, NodeSpec
from orchestrator.run.snapshot import Gpu


def claimant(name: str, node: NodeSpec) -> str:
    """The farm.yaml node a column belongs to: its toolchain columns are one node."""
    suffix = f"{TOOLCHAIN_SEP}{node.toolchain}"
    return name[: -len(suffix)] if node.toolchain and name.endswith(suffix) else name


class CardClaims:
    """The run's GPU UUIDs, each with the farm.yaml node that claimed it first."""

    def __init__(self) -> None:
        self._owner: dict[str, str] = {}
        self._lock = threading.Lock()

    def claim(self, node: str, uuids: list[str]) -> dict[str, str]:
        """Claim `uuids` for `node`; returns those another node has (uuid -> that node)."""
        with self._lock:
            taken = {u: self._owner[u] for u in uuids if self._owner.setdefault(u, node) != node}
        return taken


class RemoteCardClaims:
    """A worker process's claims, made in the parent's CardClaims: two names of one machine
    may be in two workers (each sshd's nodes stay together, but not each machine's)."""

    def __init__(self, caller: Any) -> None:
        self._caller = caller

    def claim(self, node: str, uuids: list[str]) -> dict[str, str]:
        return dict(self._caller.call("cards", "claim", node, uuids))


def refusal(gpu: Gpu, owner: str) -> str:
    """Why a node's cells do not run on a card another node of the run has."""
    return (
        f"{gpu.label} is node {owner!r}'s card too (one machine under two names in farm.yaml, or one "
        f"card reached twice): its cells run once, under {owner!r}, never twice at once nor certified "
        "twice; list the machine once, or give each name `gpus:` of its own"
    )
