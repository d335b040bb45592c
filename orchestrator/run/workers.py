"""Worker processes: one GIL per group of nodes.

On a big fleet the farm's own process is the bound: every SSH packet, frame
and stage is Python, under one GIL. With farm.yaml's `processes` (or `auto`
for a big fleet) the nodes are split into groups, each run by a worker process
with the same scheduler code (scheduler.FarmRun). The parent keeps the one
connection to the results database, the journal and the listener (the
terminal): a worker's calls to them are answered over a pipe. Nodes behind one
sshd or jump host stay in one group, so the handshake bound per sshd and the
GPU queues shared by a machine's toolchain columns stay whole. The workers are
forked from the farm's own process where that is safe (start_method), else from
a fork server.

A worker that dies (killed, out of memory) leaves its unfinished cells to the
parent, which stores them as infra-error (the farm's internal error: exit 70).
"""

from __future__ import annotations

import gc
import itertools
import math
import multiprocessing
import os
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import FarmError, StoreError
from orchestrator.guarded import WRITER_THREAD
from orchestrator.outcomes import CELL_STAGES
from orchestrator.run import fork_server
from orchestrator.run.card_claims import RemoteCardClaims
from orchestrator.run.stopping import CUT_AFTER
from orchestrator.store.liveness import THREAD_NAME as DB_WATCHDOG
from orchestrator.transport.ssh_watchdog import WATCHDOG

if TYPE_CHECKING:
    from orchestrator.config.farm import Farm
    from orchestrator.plan import Cell
    from orchestrator.run.scheduler import FarmRun

NODES_PER_WORKER = 16  # below this a worker's start and the pipes are not worth it
# what a worker may ask of the parent's store: the node's writes and the reads its cells need
STORE_CALLS = frozenset(
    {
        "add_snapshot",
        "add_node_records",
        "add_result",
        "add_attempt",
        "add_planned",
        "recorded_binary",
        "recorded_binaries",
        "metric_baseline",
    }
)


def sshd_of(farm: Farm, name: str) -> tuple[str, ...]:
    """What a node's handshakes and GPU queues are shared with: its sshd (or jump
    host); nodes without one (local, Slurm's login node) go together."""
    node = farm.nodes[name]
    if node.jump:
        return ("jump", str(node.jump))
    if node.host:
        return (node.transport, node.host, str(node.port))
    return (node.transport,)


def worker_count(farm: Farm, nodes: list[str]) -> int:
    """farm.yaml's `processes`; `auto`: one per NODES_PER_WORKER sshds, at most one per core but one."""
    setting = farm.spec.processes
    groups = len({sshd_of(farm, n) for n in nodes})
    if setting != "auto":
        return max(1, min(int(setting), groups))
    cores = usable_cpus()
    return max(1, min(math.ceil(groups / NODES_PER_WORKER) if groups >= NODES_PER_WORKER else 1, cores - 1))


def usable_cpus() -> int:
    """The CPUs this process may run on: a farm under taskset, a cpuset or a container's CPU list
    sized its workers by the machine's count (15 workers on 2 usable cores of 16)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def split(farm: Farm, by_node: dict[str, list[Cell]], count: int) -> list[dict[str, list[Cell]]]:
    """The nodes in `count` groups of about equal cells; one sshd's nodes never split."""
    together: dict[tuple[str, ...], list[str]] = {}
    for name in by_node:
        together.setdefault(sshd_of(farm, name), []).append(name)
    groups: list[dict[str, list[Cell]]] = [{} for _ in range(count)]
    load = [0] * count
    for names in sorted(together.values(), key=lambda ns: -sum(len(by_node[n]) for n in ns)):
        lightest = load.index(min(load))
        for name in names:
            groups[lightest][name] = by_node[name]
            load[lightest] += len(by_node[name])
    return [group for group in groups if group]


# threads whose state a forked child resets (os.register_at_fork), or that hold nothing it uses
# guarded.py and store/liveness.py reset their own in a child
FORK_SAFE_THREADS = frozenset({"ssh-watchdog", WRITER_THREAD, DB_WATCHDOG})
CLOSED_TRANSPORT_WAIT = 1.0  # seconds at most for closed transports' threads to end (the fork server: 0.5-1.3 s)


def start_method() -> str:
    """How the workers start. Forked from this process where no other thread of it
    runs but those the child resets: the farm is imported already, so a worker
    starts in milliseconds. Else (a thread may hold a lock the child would need)
    from a fork server, which imports the farm once: about 0.5 s on 16 cores, and
    1.3 s on 2 busy ones, before the first worker starts."""
    if "fork" not in multiprocessing.get_all_start_methods() or os.environ.get("FARM_WORKER_START") == "forkserver":
        return "forkserver"  # (the variable: bench/fleet.py's side-by-side runs)
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    _await_closed_transports(others)
    others = [t for t in others if t.is_alive()]
    return "fork" if all(t.name in FORK_SAFE_THREADS for t in others) else "forkserver"


def _await_closed_transports(threads: list[threading.Thread]) -> None:
    """Join the threads of SSH transports already closed: paramiko's close() does not
    wait for them; each ends once its reader wakes (at once: TunedTransport.stop_thread). A run
    started just after SSH was used in the same process (the fleet bench's floor run,
    a library caller) otherwise saw them alive and paid the fork server's start: the
    bench's N=32, its first size with workers, read 1.21-1.41 against N=64's 1.08-1.13."""
    deadline = time.monotonic() + CLOSED_TRANSPORT_WAIT
    for thread in threads:
        # duck-typed, so that paramiko is not imported here: a paramiko.Transport is a Thread
        # whose `active` close() set to False
        if getattr(thread, "active", None) is False and callable(getattr(thread, "stop_thread", None)):
            thread.join(max(0.0, deadline - time.monotonic()))


# the worker's side ------------------------------------------------------------------
class _Caller:
    """Calls to the parent over the pipe, from any of the worker's threads."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._send = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, list[Any]] = {}  # call id -> [event, answer]
        self._lock = threading.Lock()

    def send(self, message: tuple) -> None:
        with self._send:
            self.conn.send(message)

    def call(self, target: str, method: str, *args: Any, **kwargs: Any) -> Any:
        ident = next(self._ids)
        slot: list[Any] = [threading.Event(), None]
        with self._lock:
            self._waiting[ident] = slot
        self.send(("call", ident, target, method, args, kwargs))
        slot[0].wait()
        kind, value = slot[1]
        if kind == "error":
            raise StoreError(value)
        return value

    def answered(self, ident: int, kind: str, value: Any) -> None:
        with self._lock:
            slot = self._waiting.pop(ident)
        slot[1] = (kind, value)
        slot[0].set()

    def broken(self) -> None:
        """The parent is gone: every waiting call fails."""
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for slot in waiting.values():
            slot[1] = ("error", "the farm's parent process is gone")
            slot[0].set()


class _RemoteStore:
    def __init__(self, caller: _Caller) -> None:
        self._caller = caller

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in STORE_CALLS:
            raise AttributeError(f"a worker's store has no {method!r}: only the parent writes the run itself")
        return lambda *args, **kwargs: self._caller.call("store", method, *args, **kwargs)


class _RemoteListener:
    def __init__(self, caller: _Caller) -> None:
        self._caller = caller

    def node_ready(self, *args: Any) -> None:
        self._caller.send(("event", "node_ready", args))

    def cell_started(self, *args: Any) -> None:
        self._caller.send(("event", "cell_started", args))

    def cell_finished(self, *args: Any) -> None:
        self._caller.send(("event", "cell_finished", args))


def worker_main(
    conn: Connection, index: int, farm: Farm, token: str, trigger: str, cache_dir: Path, by_node: dict
) -> None:
    """A worker process: runs its group of nodes with the parent's run token."""
    from orchestrator.run.scheduler import FarmRun

    # a forked worker has the parent's handlers, whose stop is the parent's to make: a fresh
    from orchestrator.run.summary import RunSummary

    # process's instead (the parent tells its workers to stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    caller = _Caller(conn)
    run = FarmRun(farm, _RemoteStore(caller), _RemoteListener(caller), trigger, cache_dir)  # type: ignore[arg-type]
    run.token = token
    run.cells_from = f"w{index}."  # its cells' markers differ from every other worker's: a reap kills its own
    run.summary = RunSummary(run_id=0)
    run.cards = RemoteCardClaims(caller)

    def read() -> None:
        try:
            while True:
                message = conn.recv()
                if message[0] == "answer":
                    caller.answered(*message[1:])
                elif message[0] == "begun":
                    run.began(message[1])
                elif message[0] == "not-begun":
                    run.not_begun("the run could not be stored")
                elif message[0] == "stop":
                    run.halt(message[1])
                    WATCHDOG.cut(CUT_AFTER)  # this process's commands on a node the parent cannot reach
        except (EOFError, OSError):
            caller.broken()
            run.not_begun("the farm's parent process is gone")

    threading.Thread(target=read, daemon=True, name="parent").start()
    error = None
    try:
        run.run_nodes(by_node)
    except BaseException as err:  # said to the parent, which decides
        error = f"{type(err).__name__}: {err}"
        traceback.print_exception(err)
    summary = run.summary
    # the nodes' sums (probe, stage) only: the parent counted each cell's stages as its result came
    # (run.counted), and sent again they were doubled in the run's summary
    nodes = {name: seconds for name, seconds in summary.stage_seconds.items() if name not in CELL_STAGES}
    caller.send(("done", nodes, summary.bytes_shipped, summary.internal, error))
    conn.close()


# the parent's side ------------------------------------------------------------------
class Workers:
    """The worker processes of one run, and the threads that answer them."""

    def __init__(self, run: FarmRun, groups: list[dict[str, list[Cell]]]) -> None:
        self.run = run
        self.groups = groups
        self.start_method = start_method()
        context = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":
            # the SSH transport too (Fabric and paramiko: 0.15-0.3 s of CPU): each worker imported it anew
            context.set_forkserver_preload(
                ["orchestrator.run.scheduler", "orchestrator.run.workers", "orchestrator.transport.ssh"]
            )
        self.conns: list[Connection] = []
        self.processes = []
        self.threads = []
        self.failure: BaseException | None = None  # a store error the run ends on
        if self.start_method == "fork":
            # the node runner compiled and squeezed once, here, for all of them (26 ms each; workers x nodes
            # raced to it)
            from orchestrator.run.probe import RUNNER_SOURCE
            from orchestrator.run.resident import compiled, squeezed

            squeezed(compiled(RUNNER_SOURCE))
            # what the workers inherit is left out of their collections: a collection touching
            # each object would copy every page of the parent's heap into each of them
            gc.freeze()
        for group in groups:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=worker_main,
                args=(theirs, len(self.processes), run.farm, run.token, run.trigger, run.cache_dir, group),
                name=f"farm-worker-{len(self.processes)}",
                daemon=True,
            )
            with warnings.catch_warnings():  # Python's warning about forking threads: start_method() checked them
                warnings.simplefilter("ignore", DeprecationWarning)
                process.start()
            theirs.close()
            self.conns.append(ours)
            self.processes.append(process)
        if self.start_method == "fork":
            gc.unfreeze()
        else:
            fork_server.unname()  # before any node's command: a local kernel connected to it (red-team 187)
        self._send_locks = [threading.Lock() for _ in self.conns]
        for index in range(len(groups)):
            thread = threading.Thread(target=self._serve, args=(index,), daemon=True, name=f"worker-{index}")
            thread.start()
            self.threads.append(thread)

    def begun(self, run_id: int) -> None:
        self.tell("begun", run_id)

    def not_begun(self) -> None:
        self.tell("not-begun")
        self.wait()

    def tell(self, *message: Any) -> None:
        for index in range(len(self.conns)):
            self._send(index, message)

    def _send(self, index: int, message: tuple) -> None:
        try:
            with self._send_locks[index]:
                self.conns[index].send(message)
        except (OSError, ValueError):
            pass  # a worker that is gone: its reader thread deals with it

    def _serve(self, index: int) -> None:
        run, conn = self.run, self.conns[index]
        done = False
        try:
            while True:
                message = conn.recv()
                kind = message[0]
                if kind == "call":
                    _, ident, target, method, args, kwargs = message
                    try:
                        if (target, method) == ("cards", "claim"):  # one card, one node: card_claims.py
                            value = run.cards.claim(*args, **kwargs)
                        elif target != "store" or method not in STORE_CALLS:
                            raise StoreError(f"a worker asked for {target}.{method}, which it may not")
                        else:
                            value = getattr(run.store, method)(*args, **kwargs)
                        if method == "add_result":  # stored: the worker may die before it says so
                            record = args[0]
                            run.stored_result(record.node, record.kernel, record.variant, record.device)
                        self._send(index, ("answer", ident, "ok", value))
                    except FarmError as err:
                        if isinstance(err, StoreError) and self.failure is None:
                            self.failure = err
                            threading.Thread(
                                target=run.stop, args=("the results database failed",), daemon=True
                            ).start()
                        self._send(index, ("answer", ident, "error", str(err)))
                elif kind == "event":
                    _, name, args = message
                    if name == "cell_finished":
                        run.counted(*args)
                    getattr(run.listener, name)(*args)
                elif kind == "done":
                    _, seconds, shipped, internal, error = message
                    run.add_to_summary(seconds, shipped, [*internal, *([f"worker {index}: {error}"] if error else [])])
                    done = True
                    return
        except (EOFError, OSError):
            pass
        finally:
            if not done:
                self._lost(index)

    def _lost(self, index: int) -> None:
        """A worker that ended without saying so: its unfinished cells are stored here."""
        process = self.processes[index]
        process.join(5)
        why = f"the farm's worker process {process.name} ended (exit {process.exitcode}) before its nodes were done"
        for name, cells in self.groups[index].items():
            self.run.node_broke(name, cells, RuntimeError(why))

    def wait(self) -> None:
        for thread in self.threads:
            thread.join()
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.kill()
        if self.start_method == "forkserver":
            fork_server.retire()
        if self.failure is not None:
            raise self.failure
