"""Stopping a run: whether and why it is being stopped, and the kills on its nodes.

A stop (SIGTERM, Ctrl-C, `farm bisect`'s) starts no more cells and kills every
process the run started on every node, found by the run's FARM_RUN marker
through a connection of its own, all nodes at once. A cell whose trip was on
its way when the stop came can still reach its node after that kill, so the
nodes are swept again each second until the run has ended. A worker process
only halts (starts no more cells): its parent does the killing. What a SIGKILLed
run left is killed by the next start (reap_dead_runs).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.errors import FarmError
from orchestrator.transport import Transport
from orchestrator.transport.ssh_watchdog import WATCHDOG

if TYPE_CHECKING:
    from orchestrator.config.farm_spec import NodeSpec

CUT_AFTER = 3.0  # seconds a stopped run's commands get to end (killed) before their connections are closed
SWEEP_LIMIT = 900.0  # seconds a stopped run's nodes are swept again at most (its cells' limits end it sooner)


class Stopping:
    """One run's stop: the nodes it kills on (`nodes`, once the run started them),
    the worker processes it tells (`workers`), and `ended` (set once the run returned)."""

    def __init__(self, transport: Callable[[str], Transport], token: str) -> None:
        self._transport = transport  # a new transport to a node, by name
        self._token = token  # the run's FARM_RUN marker
        self._set = threading.Event()
        self._reason: str | None = None
        self.ended = threading.Event()  # the run has returned (or raised): the sweeps end
        self.nodes: list[str] = []  # a stop before the run started its nodes has nothing to kill
        self.tell: Callable[[str], None] | None = None  # passes the stop on to worker processes

    @property
    def why(self) -> str | None:
        """Why the run is being stopped (e.g. "SIGTERM"), or None."""
        return self._reason if self._set.is_set() else None

    def is_set(self) -> bool:
        return self._set.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, or less where the run is stopped meanwhile: whether it was."""
        return self._set.wait(seconds)

    def halt(self, reason: str) -> None:
        """Start no more cells, killing nothing."""
        if not self._set.is_set():
            self._reason = reason
            self._set.set()

    def stop(self, reason: str, grace: float = 10.0) -> int:
        """Halt, and kill what the run started on every node; the number of processes
        killed. Waits at most `grace` seconds for the nodes, then sweeps them again
        each second in the background until the run has ended."""
        if self._set.is_set():
            return 0
        self.halt(reason)
        WATCHDOG.cut(CUT_AFTER)  # a node that cannot be reached to kill its commands holds none of them
        killed: list[int] = []

        def kill_on(name: str) -> None:
            transport = self._transport(name)
            try:
                transport.open()
                killed.append(transport.stop_run(self._token, grace))  # Slurm: scancel of the run's jobs
            except FarmError:
                pass
            finally:
                transport.close()

        if self.tell is not None:
            self.tell(reason)
        threads = [threading.Thread(target=kill_on, args=(n,), daemon=True, name=f"stop-kill-{n}") for n in self.nodes]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + grace
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0))
        # a cell whose trip was on its way when the stop came (a worker process hears of it in
        # its own time; a thread may be past its last look at `why`) can reach its node
        # after that kill: the nodes are swept again, every second, until the run has ended
        threading.Thread(target=self._sweep_until_ended, daemon=True, name="stop-sweeps").start()
        return sum(killed)

    def _sweep_until_ended(self, limit: float = SWEEP_LIMIT) -> None:
        """Kill what the run has left on its nodes each second (one connection per node,
        kept), until the run has ended, or for `limit` seconds at most."""
        transports: dict[str, Transport] = {}
        give_up = time.monotonic() + limit
        try:
            while not self.ended.wait(1.0) and time.monotonic() < give_up:
                for name in list(self.nodes):
                    transport = transports.get(name)
                    try:
                        if transport is None:
                            transport = transports[name] = self._transport(name)
                        transport.open()
                        transport.stop_run(self._token, 10.0)
                    except FarmError:
                        transports.pop(name, None)  # reconnected on the next pass
                        if transport is not None:
                            transport.close()
        finally:
            for transport in transports.values():
                transport.close()
            WATCHDOG.uncut()  # the process's next run (farm bisect's) has its commands' own limits


def reap_dead_runs(
    nodes: dict[str, NodeSpec], tokens: dict[int, str], grace: float = 10.0
) -> list[tuple[int, str, int]]:
    """Kill what the runs of `tokens` (run id -> FARM_RUN) left on `nodes`: runs a farm SIGKILLed,
    which the next start, holding the run lock, has just marked aborted, so none of them is alive.
    Their runner and a hung kernel held the GPU until the kernel's limit, the next run's cells
    waiting on it (a red-team finding). All at once, `grace` seconds at most; a node that cannot
    be reached is left as it is (its cells say so). Returns (run id, node, processes killed)."""
    from orchestrator.transport import transport_for

    killed: list[tuple[int, str, int]] = []

    def reap_on(run_id: int, token: str, name: str) -> None:
        transport = transport_for(name, nodes[name], token)  # Slurm's: the dead run's jobs by their name
        try:
            transport.open()
            if count := transport.stop_run(token, grace):
                killed.append((run_id, name, count))
        except FarmError:
            pass
        finally:
            transport.close()

    threads = [
        threading.Thread(target=reap_on, args=(run_id, token, name), daemon=True, name="reap-dead-run")
        for run_id, token in tokens.items()
        for name in nodes
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + grace
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    return sorted(killed)
