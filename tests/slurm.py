"""A real single-host Slurm cluster for the tests, started and stopped by a fixture.

Debian's munged, slurmctld and slurmd (Slurm 22.05), nothing faked: one
munged with its own key and socket, one slurmctld, and one slurmd per compute
node (`slurmd -N NODE`, each on its own port of 127.0.0.1), all under a fresh
folder with their own slurm.conf, on ports of their own, so a Slurm the
machine may already run is never touched. Client commands find the cluster
through SLURM_CONF (`cluster.env`; in farm.yaml the node's `env`).

Partitions, one compute node each:

    t4, a100, h100   nodes t4node, a100node, h100node, each with one GPU in
                     Slurm's books (gres gpu:1) and that card's nvidia-smi
                     stand-in first on PATH in its jobs (a TaskProlog exports
                     it by $SLURMD_NODENAME), as a real compute node has its own
    parked           node parkednode: declared DOWN and never started, so a
                     job for it waits until its pending limit

A card partition's value may be a list of cards (a compute node with GPUs of
several models); a file `visible` beside its stand-in holds the
CUDA_VISIBLE_DEVICES its jobs get, as Slurm sets it for the GPU it allocated.
`shared` adds partitions made of several of those compute nodes (a partition
whose nodes differ: SlurmCluster(shared={"mixed": ["t4", "h100"]})).

Needs root (slurmd starts jobs as their user) and the Debian packages munge,
slurmctld, slurmd and slurm-client (scripts/setup.sh --test installs them).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nodes import CARDS, Card, free_port, nvidia_smi_script

TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "squeue", "scontrol", "scancel")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
GPU_PARTITIONS = ("t4", "a100", "h100")
PARKED = "parked"


def tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in SBIN:
        candidate = Path(folder) / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def missing_tools() -> list[str]:
    return [name for name in TOOLS if tool(name) is None]


def node_name(partition: str) -> str:
    return f"{partition}node"


class SlurmCluster:
    """munged + slurmctld + one slurmd per GPU partition; `start()`, `stop()`."""

    def __init__(
        self,
        cards: dict[str, Card | list[Card]] | None = None,
        shared: dict[str, list[str]] | None = None,
        def_mem_per_cpu: dict[str, int] | None = None,
    ) -> None:
        self.cards = dict(cards or {p: CARDS[p] for p in GPU_PARTITIONS})
        # partition -> DefMemPerCPU (MB): memory enforced as a real cluster does, by slurmstepd's
        # OverMemoryKill (no cgroups in a container); off by default, as memory then is a consumable
        self.def_mem_per_cpu = dict(def_mem_per_cpu or {})
        self.shared = dict(shared or {})  # partition -> the card partitions whose compute nodes it also holds
        # munged insists that every folder above its socket is searchable by
        # all, which pytest's 0700 tmp folders are not: a folder of our own.
        self.root = Path(tempfile.mkdtemp(prefix="farm-slurm-", dir="/tmp" if os.path.isdir("/tmp") else None))
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.munge_dir = self.root / "munge"
        self.socket = self.munge_dir / "munge.socket"
        self.logs = self.root / "log"
        self.user = getpass.getuser()
        self.host = socket.gethostname().split(".")[0]
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._log_handles: list = []

    # ---------------------------------------------------------------- files
    def gpu_bin(self, partition: str) -> Path:
        return self.root / "gpus" / node_name(partition)

    def _write_files(self) -> None:
        for folder in ("munge", "log", "state", "spool"):
            (self.root / folder).mkdir(mode=0o755, exist_ok=True)
        key = self.munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        for partition, card in self.cards.items():
            folder = self.gpu_bin(partition)
            folder.mkdir(parents=True, exist_ok=True)
            smi = folder / "nvidia-smi"
            smi.write_text(nvidia_smi_script(card))
            smi.chmod(0o755)
            (self.root / "spool" / node_name(partition)).mkdir(exist_ok=True)
        prolog = self.root / "taskprolog"
        prolog.write_text(
            "#!/bin/sh\n"
            "# a compute node's own GPU: its nvidia-smi stand-in first on PATH\n"
            f'echo "export PATH={self.root}/gpus/$SLURMD_NODENAME:$PATH"\n'
            f"v={self.root}/gpus/$SLURMD_NODENAME/visible\n"
            '[ ! -f "$v" ] || echo "export CUDA_VISIBLE_DEVICES=$(cat "$v")"\n'
        )
        prolog.chmod(0o755)
        self.ctld_port = free_port()
        node_lines = []
        gres_lines = []
        self.node_ports: dict[str, int] = {}
        memory = "RealMemory=4000 " if self.def_mem_per_cpu else ""
        for partition in [*self.cards, PARKED]:
            name = node_name(partition)
            self.node_ports[name] = free_port()
            state = 'State=DOWN Reason="never started: the farm\'s pending-limit test"' if partition == PARKED else ""
            node_lines.append(
                f"NodeName={name} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={self.node_ports[name]} "
                f"CPUs=4 {memory}Gres=gpu:1 {state}".rstrip()
            )
            gres_lines.append(f"NodeName={name} Name=gpu File=/dev/null")
        partitions = [
            f"PartitionName={p} Nodes={node_name(p)} MaxTime=60 State=UP"
            + (f" DefMemPerCPU={self.def_mem_per_cpu[p]}" if p in self.def_mem_per_cpu else "")
            for p in [*self.cards, PARKED]
        ]
        gather = (
            ["JobAcctGatherType=jobacct_gather/linux", "JobAcctGatherFrequency=1", "JobAcctGatherParams=OverMemoryKill"]
            if self.def_mem_per_cpu
            else ["JobAcctGatherType=jobacct_gather/none"]
        )
        partitions += [
            f"PartitionName={p} Nodes={','.join(node_name(n) for n in nodes)} MaxTime=60 State=UP"
            for p, nodes in self.shared.items()
        ]
        r = self.root
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=farmtest",
                    f"SlurmctldHost={self.host}(127.0.0.1)",
                    f"SlurmctldPort={self.ctld_port}",
                    f"SlurmdPort={free_port()}",
                    f"SlurmUser={self.user}",
                    f"SlurmdUser={self.user}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.socket}",
                    f"StateSaveLocation={r}/state",
                    f"SlurmdSpoolDir={r}/spool/%n",
                    f"SlurmctldPidFile={r}/slurmctld.pid",
                    f"SlurmdPidFile={r}/slurmd-%n.pid",
                    f"SlurmctldLogFile={r}/log/slurmctld.log",
                    f"SlurmdLogFile={r}/log/slurmd-%n.log",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    *gather,
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "SelectType=select/cons_tres",
                    f"SelectTypeParameters=CR_Core{'_Memory' if self.def_mem_per_cpu else ''}",
                    # the declared CPUs (4 per node) need not match this machine
                    "SlurmdParameters=config_overrides",
                    "MpiDefault=none",
                    "ReturnToService=2",
                    "KillWait=5",
                    "MailProg=/bin/true",
                    # start a job the moment another ends (the default waits up to 3 s)
                    "SchedulerParameters=batch_sched_delay=0",
                    "GresTypes=gpu",
                    f"TaskProlog={prolog}",
                    *node_lines,
                    *partitions,
                    "",
                ]
            )
        )
        (self.root / "gres.conf").write_text("\n".join(gres_lines) + "\n")

    # ---------------------------------------------------------------- life
    def _spawn(self, key: str, argv: list[str]) -> subprocess.Popen[bytes]:
        handle = open(self.logs / f"{key}.out", "ab")  # noqa: SIM115 - closed in stop()
        self._log_handles.append(handle)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT, env=self.env)
        self.procs[key] = proc
        return proc

    def _wait(self, what: str, ready, timeout: float, watch: list[str]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for key in watch:
                if self.procs[key].poll() is not None:
                    raise RuntimeError(
                        f"{key} exited {self.procs[key].returncode} while waiting for {what}\n{self.logs_tail()}"
                    )
            if ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"test Slurm: {what} not ready within {timeout:.0f} s\n{self.logs_tail()}")

    def start(self) -> None:
        missing = missing_tools()
        if missing:
            raise RuntimeError(
                f"the test Slurm cluster needs {', '.join(missing)}: install Debian's munge, slurmctld, "
                "slurmd and slurm-client (scripts/setup.sh --test does)"
            )
        self._write_files()
        try:
            self._spawn(
                "munged",
                [
                    str(tool("munged")),
                    "--foreground",
                    f"--key-file={self.munge_dir / 'munge.key'}",
                    f"--socket={self.socket}",
                    f"--pid-file={self.munge_dir / 'munged.pid'}",
                    f"--log-file={self.logs / 'munged.log'}",
                    f"--seed-file={self.munge_dir / 'munged.seed'}",
                ],
            )
            self._wait("munged's socket", self.socket.exists, 15, ["munged"])
            self._spawn("slurmctld", [str(tool("slurmctld")), "-D", "-f", str(self.conf)])
            self._wait(
                "slurmctld", lambda: self.cmd(["scontrol", "ping"], check=False).returncode == 0, 30, ["slurmctld"]
            )
            for partition in self.cards:
                name = node_name(partition)
                self._spawn(f"slurmd-{name}", [str(tool("slurmd")), "-D", "-f", str(self.conf), "-N", name])
            self._wait("the compute nodes (idle in sinfo)", self._nodes_idle, 30, list(self.procs))
        except BaseException:
            self.stop()
            raise

    def _nodes_idle(self) -> bool:
        states = self.node_states()
        return all(states.get(node_name(p)) == "idle" for p in self.cards)

    def node_states(self) -> dict[str, str]:
        done = self.cmd(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        return dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)

    def wait_idle(self, timeout: float = 30) -> None:
        self._wait("the compute nodes (idle in sinfo)", self._nodes_idle, timeout, list(self.procs))

    def stop(self) -> None:
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            # no job may outlive the cluster: its slurmstepd would run on alone
            self.cmd(["scancel", f"--user={self.user}"], check=False)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.jobs(states="RUNNING,COMPLETING,PENDING"):
                time.sleep(0.2)
        for key in [k for k in self.procs if k.startswith("slurmd-")] + ["slurmctld", "munged"]:
            proc = self.procs.pop(key, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        for handle in self._log_handles:
            handle.close()
        self._log_handles = []
        shutil.rmtree(self.root, ignore_errors=True)

    # ---------------------------------------------------------------- clients
    def cmd(self, argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        argv = [tool(argv[0]) or argv[0], *argv[1:]]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=check)

    def jobs(self, states: str = "all", partition: str | None = None) -> list[dict[str, str]]:
        """squeue's records (finished jobs stay listed for MinJobAge, 300 s)."""
        argv = ["squeue", "-h", "-t", states, "-o", "%i|%j|%P|%T|%N|%r"]
        if partition:
            argv += ["-p", partition]
        done = self.cmd(argv, check=False)
        keys = ("id", "name", "partition", "state", "node", "reason")
        return [dict(zip(keys, line.split("|"), strict=False)) for line in done.stdout.splitlines() if line]

    def logs_tail(self, lines: int = 15) -> str:
        out = []
        for path in sorted(self.logs.glob("*")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    # ---------------------------------------------------------------- farm
    def farm_entry(self, partition: str, workdir: Path, nvcc: str, **overrides: object) -> dict[str, object]:
        """A farm.yaml `nodes:` entry for a partition, the farm's own host as login node."""
        entry: dict[str, object] = {
            "transport": "slurm",
            "partition": partition,
            "gres": "gpu:1",
            "pending_limit": 60,
            "nvcc": nvcc,
            "workdir": str(workdir),
            "env": {"SLURM_CONF": str(self.conf)},
        }
        card = self.cards.get(partition)
        if isinstance(card, Card):
            entry["gpu"] = card.name
            entry["cc"] = card.cc
        entry.update(overrides)
        return entry


@contextlib.contextmanager
def running_cluster(*args: Any, **kwargs: Any) -> Iterator[SlurmCluster]:
    """A started SlurmCluster(*args, **kwargs), stopped after; a machine without Slurm's tools fails
    the test (never a skip: a CI without Slurm must go red). One copy for every test file's fixture."""
    missing = missing_tools()
    if missing:
        pytest.fail(f"Slurm tests need {', '.join(missing)}; run scripts/setup.sh --test (as root)")
    c = SlurmCluster(*args, **kwargs)
    c.start()
    try:
        yield c
    finally:
        c.stop()
