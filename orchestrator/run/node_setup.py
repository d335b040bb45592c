"""A node brought up for a run, before its cells: connected (its SSH handshakes
throttled per sshd), probed (by its resident runner where the node can run one,
which then serves the cells), found usable, and staged (the bundles its cells'
jobs need). Each step is stamped into the node's stage records; an infra failure
is raised to the scheduler, which retries the node or records its cells.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.config.farm import Farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import InfraError, NodeUnusable, SessionLost
from orchestrator.outcomes import NODE_STAGES
from orchestrator.plan import Cell
from orchestrator.run import bundle, staging
from orchestrator.run.cell import StageRecord
from orchestrator.run.login_limits import limits_problem
from orchestrator.run.probe import probe, resident_probe, shipped_nvcc
from orchestrator.run.resident import ResidentRunner
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.transport import Transport


class NodeSetup:
    """How the run's nodes are brought up: one per run, shared by its nodes' threads."""

    def __init__(self, farm: Farm, bundles: bundle.Bundles, cache_dir: Path) -> None:
        self.farm = farm
        self._bundles = bundles  # built once per run, shared by the nodes
        self.cache_dir = cache_dir
        self._handshakes: dict[str, threading.BoundedSemaphore] = {}  # sshd -> its handshakes in flight
        self._lock = threading.Lock()

    def open(self, transport: Transport) -> None:
        node = transport.node
        if not node.host:  # nothing to shake hands with
            transport.open()
            return
        sshd = node.jump or f"{node.host}:{node.port}"
        with self._lock:
            gate = self._handshakes.setdefault(sshd, threading.BoundedSemaphore(self.farm.spec.max_connections))
        with gate:
            transport.open()

    def setup(
        self,
        setup: Transport,
        cells: list[Cell],
        records: list[StageRecord],
        partial: list[NodeSnapshot],
        resident: list[ResidentRunner],
    ) -> staging.Staging:
        """probe, then stage; each stage stamped into `records`, the snapshot into `partial`,
        the resident runner that answered the probe into `resident`. The probe also
        reads the digests of what staging needs, so a node that holds it all is staged
        without a round trip of its own."""
        node = setup.node
        jobs = [self.farm.jobs[kernel] for kernel in dict.fromkeys(c.kernel for c in cells)]
        needs: bundle.Needs | None = None
        needs_error: InfraError | None = None
        try:
            needs = self._bundles.needs(jobs, node)
        except InfraError as err:  # the stage stage reports it, in its own name
            needs_error = err
        for stage in NODE_STAGES:
            started = datetime.now(UTC)
            clock = time.monotonic()
            try:
                if stage == "probe":
                    self.open(setup)
                    snapshot = self.probe(setup, needs, resident)
                    partial.append(snapshot)
                    check_probed(self.farm, setup, snapshot)
                    # who runs the cells' stages there: said on every cell's page
                    detail = f"stages run by {snapshot.runner_label(node)}"
                else:
                    if needs is None:
                        assert needs_error is not None
                        raise needs_error
                    snapshot = partial[0]
                    if node.pypi_toolchain and "x86_64" not in snapshot.os:
                        raise NodeUnusable(
                            f"node {setup.name!r}: NVIDIA's PyPI toolkits are x86_64 builds; this node is "
                            f"{snapshot.os or 'of an unknown architecture'}"
                        )
                    staged = staging.stage(
                        setup,
                        snapshot.workdir,
                        needs,
                        snapshot.folder_digests,
                        self.cache_dir,
                        resident[0] if resident else None,
                        snapshot.placed,
                    )
                    detail = "; ".join([f"{staged.shipped} bytes shipped", *staged.notes.values()])
                    if staged.toolchain is not None:  # its nvcc is there now: ask it what it is
                        partial[0] = snapshot = shipped_nvcc(setup, snapshot, staged.toolchain.folder)
                        if snapshot.nvcc_version is None:
                            said = " / ".join(snapshot.nvcc_output.strip().splitlines()[-3:])[-300:]
                            raise NodeUnusable(f"node {setup.name!r}: the shipped nvcc does not run ({said})")
            except InfraError as err:
                records.append(StageRecord(stage, "infra", started, time.monotonic() - clock, str(err)))
                raise
            records.append(StageRecord(stage, "ok", started, time.monotonic() - clock, detail))
        return staged

    def probe(self, setup: Transport, needs: bundle.Needs | None, resident: list[ResidentRunner]) -> NodeSnapshot:
        """Where a transport keeps processes, the node's resident runner is started at
        once and answers the probe (and places the small bundles sent with it), then
        serves the cells (`runner: auto`); where it cannot start (no python3 of 3.8 or
        later), the shell probe says what the node has, and its cells run in a python3
        each or in the shell."""
        node = setup.node
        folders = needs.folders if needs else []
        first: SessionLost | None = None
        took = 0.0
        if node.runner == "auto" and setup.keeps_processes:
            runner = ResidentRunner(setup.sibling(), "python3", self.open)
            clock = time.monotonic()
            try:
                snapshot = resident_probe(runner, node, folders, staging.offered(needs) if needs else None)
            except SessionLost as err:
                runner.close()
                first, took = err, time.monotonic() - clock
            except BaseException:
                runner.close()
                raise
            else:
                if snapshot.resident:
                    resident.append(runner)
                else:
                    runner.close()
                return snapshot
        if first is None:
            return probe(setup, folders)
        try:
            return probe(setup, folders)
        except InfraError as err:
            # the shell probe on the connection the runner's failure broke said only "SSH session not
            # active", and the runner's stall (a node->farm path dropping large packets) went unsaid
            # the same error, its words grown: its class and its own retryable/unreachable kept (a class
            # of its own may take more than a message to make anew: SlurmJobError)
            err.args = (
                f"{err}; before it, the resident runner's probe failed after {took:.0f} s: {first}. A node "
                "that takes a connection and then falls silent on it, with no reset, is frozen or sits behind "
                "a path that drops large packets (a path-MTU black hole: the handshake passes, transfers stall)",
            )
            raise

    @staticmethod
    def check_usable(name: str, node: NodeSpec, snapshot: NodeSnapshot, pins_gpus: bool = True) -> None:
        """A node that cannot serve its cells is unusable, and says why, rather than turn
        its trouble into kernel verdicts or a green row of compile-only cells: a GPU
        farm.yaml declares that the probe does not find (a broken driver, a wrong `gpus:`
        index), too little room or a noexec work folder, a GPU stack that is there and fails."""
        missing = sorted(set(node.gpus or []) - snapshot.gpu_indexes)
        if missing:
            raise NodeUnusable(
                f"node {name!r}: farm.yaml's gpus lists {missing}, which nvidia-smi does not list "
                f"(it lists {sorted(snapshot.gpu_indexes) or 'no GPU'})"
            )
        if node.cc is not None and not snapshot.has_gpu:
            said = snapshot.smi_output.strip().splitlines()
            words = " / ".join(said[-2:])[-200:] or "no output"
            if said and said[-1].strip() == "rc=124":  # the probe's bound on it: hung, not empty
                words = "it did not answer within 50 s"
            raise NodeUnusable(
                f"node {name!r}: farm.yaml declares a CC {node.cc} GPU, but nvidia-smi lists none "
                f"({words}): not run as a compile-only node"
            )
        if (short := snapshot.room_problem() or limits_problem(snapshot)) is not None:
            raise NodeUnusable(f"node {name!r}: {short}: a node's trouble, not a kernel's")
        # as the hex they are: one UUID in capitals (or with a blank) on a second row was a second
        # card, slot and lock file of one GPU, its cells run at once on it (red-team round 96)
        uuids = [gpu.uuid.strip().lower() for gpu in snapshot.gpus]
        if twice := [g.uuid for g, uuid in zip(snapshot.gpus, uuids, strict=True) if uuids.count(uuid) > 1]:
            # the farm pins a cell to its card by UUID: one UUID on two cards (a T4 and an H100) is
            # no card it can pin, and the cells ran on whichever CUDA took (a red-team finding)
            raise NodeUnusable(
                f"node {name!r}: nvidia-smi lists UUID {twice[0]} for more than one GPU: "
                "no cell can be pinned to its card"
            )
        if not pins_gpus and len(models := snapshot.devices()) > 1:
            # Slurm picks each job's GPU, the farm cannot: its cells were labelled with the first card
            # and run on whichever Slurm gave them (a pass for a T4 that ran on an H100: a red-team finding)
            raise NodeUnusable(
                f"node {name!r}: its compute node has GPUs of more than one model ({', '.join(models)}), and "
                "the scheduler, not the farm, picks each job's GPU: no cell could be judged against the card "
                "it ran on"
            )
        if not snapshot.has_gpu and snapshot.unreadable_gpus:  # its only cards are in a bad state
            raise NodeUnusable(
                f"node {name!r}: nvidia-smi lists a GPU whose row cannot be read ({snapshot.unreadable_gpus[0]}): "
                "a card in a bad state is not a node without one"
            )
        if not snapshot.has_gpu and (broken := snapshot.gpu_problem()):
            # a node declaring nothing (farm.yaml's `local`) whose GPU stack is there but fails: its cells
            # were a green compile-only row, the failure said nowhere (found by a red-team helper)
            raise NodeUnusable(f"node {name!r}: {broken}: a broken GPU is not a node without one")


def check_probed(farm: Farm, setup: Transport, snapshot: NodeSnapshot) -> None:
    """Raises NodeUnusable where a probed node cannot serve its cells: no working nvcc, no work
    folder, or what NodeSetup.check_usable refuses. `farm verify` and `farm nodes` both ask it:
    `farm nodes` printed a green row, exit 0, for a node every cell of which the night's run
    made infra-error (a red-team finding)."""
    node = setup.node
    if snapshot.nvcc_version is None and not node.pypi_toolchain:  # that one is shipped first
        said = snapshot.nvcc_output.strip().splitlines()
        words = " / ".join(said[-3:])[-300:]
        if said and said[-1].strip() == "rc=124":  # the probe's bound on it: hung
            words = "`nvcc --version` did not answer within 50 s"
        error = NodeUnusable(
            f"node {setup.name!r}: no working nvcc at {node.nvcc!r} ({words})"
            f"{_nvcc_advice(farm, node, snapshot.nvcc_output)}"
        )
        # missing is missing; anything else (a fork failing under load) may pass
        error.retryable = not _nvcc_missing(snapshot.nvcc_output, unrunnable=True)
        raise error
    if not snapshot.workdir:
        raise NodeUnusable(_workdir_refused(farm, setup))
    NodeSetup.check_usable(setup.name, node, snapshot, setup.pins_gpus)


def _nvcc_missing(said: str, unrunnable: bool = False) -> bool:
    """Whether the probe's nvcc was not there to start (`unrunnable`: or not executable): its status,
    `timeout`'s and the shell's 127 (126), or the tools' English words. Words alone missed a node whose
    locale says them in its language (a German node's "Datei oder Verzeichnis nicht gefunden", red-team
    224): no advice, and the probe tried again as a passing fault."""
    lines = said.strip().splitlines()
    status = lines[-1].strip() if lines else ""
    words = r"not found|No such file" + (r"|Permission denied" if unrunnable else "")
    return status == "rc=127" or (unrunnable and status == "rc=126") or bool(re.search(words, said))


def _nvcc_advice(farm: Farm, node: NodeSpec, said: str) -> str:
    """What to do where a bare `nvcc` was not found: cron (PATH=/usr/bin:/bin) and systemd
    start the farm with a PATH that lacks /usr/local/cuda/bin, and the node was infra
    every night with no word of why (a red-team finding)."""
    if "/" in node.nvcc or not _nvcc_missing(said):
        return ""
    path = f"PATH ({os.environ.get('PATH', '')})" if node.transport == "local" else "the node's PATH over SSH"
    return (
        f"; not on {path}, as under cron or systemd: give its full path as the node's `nvcc:` in "
        f"{farm.file.name} (e.g. nvcc: /usr/local/cuda/bin/nvcc), or set PATH in the crontab or unit"
    )


def _workdir_refused(farm: Farm, setup: Transport) -> str:
    """Why the work folder could not be made, asked once more of the node: "cannot create its
    work folder '~/farm'" alone left the operator to guess which folder (HOME is the login's)
    and why (a read-only HOME, a missing parent, a full disk)."""
    workdir = setup.node.workdir
    # as probe_command names it: "~" expands on the node
    target = '"$HOME"/' + shlex.quote(workdir[2:]) if workdir.startswith("~/") else shlex.quote(workdir)
    try:
        said = setup.run(f'echo "$HOME"; mkdir -p {target}/incoming 2>&1 | tail -n 2', timeout=30).stdout
    except InfraError as err:
        said = f"\n(asking why failed: {err})"
    home, _, why = said.partition("\n")
    reason = " / ".join(line.strip() for line in why.splitlines() if line.strip())[-300:]
    return (
        f"node {setup.name!r}: cannot create its work folder {workdir!r} ({reason or 'no reason given'}; "
        f"the login's HOME is {home.strip() or 'unset'}): set `workdir` in {farm.file.name} to a folder "
        "that login can write"
    )
