"""Helpers for tests/test_faults.py: fault-injection nodes, process trees, the
faults stand-in job, and a farm writer that ships it.

Everything here acts on real processes: sshd trees are killed or frozen by pid
(found by walking /proc from the node's own listener, never by name), a network
is cut by taking a veth link down in a network namespace, a disk is filled by a
tmpfs mount.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nodes import CARDS, LOOPBACK, SSHD, Card, SshNode, standin_job, write_farm

FAULTS_SOURCE = Path(__file__).resolve().parent / "standin" / "faults.cpp"
FAULTS_KERNEL = "faults"


# ----------------------------------------------------------------- jobs, farms


def faults_variant(mode: str, contract: dict[str, str], *defines: str, **extra: object) -> dict[str, object]:
    """A variant building tests/standin/faults.cpp with -DMODE_<mode> and -D<defines>."""
    flags = " ".join([f"-DMODE_{mode}", *(f"-D{d}" for d in defines)])
    variant: dict[str, object] = {
        "build": f"g++ -O1 {flags} -o {{binary}} {{sources}}",
        "inspect": "objdump -d {binary}",
        "instructions": {"call": 1},
        "cc": contract,
    }
    variant.update(extra)
    return variant


def faults_job(variants: dict[str, dict[str, object]], sources: list[str] | None = None, **extra: object) -> dict:
    job = standin_job(FAULTS_KERNEL, variants, **extra)
    job["sources"] = sources or [f"kernels/{FAULTS_SOURCE.name}"]
    return job


def write_fault_farm(
    root: Path,
    nodes: dict[str, dict[str, object]],
    jobs: list[dict],
    extra_files: dict[str, bytes] | None = None,
    **farm_keys: object,
) -> Path:
    """write_farm, plus kernels/faults.cpp and any `extra_files` (name -> bytes under root)."""
    path = write_farm(root, nodes, jobs, **farm_keys)
    shutil.copyfile(FAULTS_SOURCE, root / "kernels" / FAULTS_SOURCE.name)
    for name, data in (extra_files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return path


def run_in_background(config: Path, root: Path) -> tuple[threading.Thread, dict[str, object], Any]:
    """The farm of CONFIG run in this process on a thread of its own, as `farm verify --all` runs it:
    the thread (started), a dict that gets the run's "summary" or its "error", and the store (the
    caller closes it)."""
    from orchestrator.config.farm import load_farm
    from orchestrator.plan import plan_cells
    from orchestrator.run.scheduler import run_cells
    from orchestrator.store.database import Store

    farm = load_farm(config)
    store = Store(farm.database_url)
    outcome: dict[str, object] = {}

    def farm_run() -> None:
        try:
            outcome["summary"] = run_cells(
                farm, store, plan_cells(farm, None), cache_dir=root / "archives", trigger="test"
            )
        except BaseException as err:  # the test's thread says it
            outcome["error"] = err

    thread = threading.Thread(target=farm_run, daemon=True)
    thread.start()
    return thread, outcome, store


def wait_for(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.05) -> object:
    """Poll until `predicate()` is truthy; its value, or AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# ----------------------------------------------------------------- processes


def _ppid_and_comm(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), comm


def descendants(root: int) -> list[tuple[int, str]]:
    """(pid, comm) of every live descendant of `root`, parents before children."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = _ppid_and_comm(int(entry.name))
            if info is not None:
                children.setdefault(info[0], []).append((int(entry.name), info[1]))
    found: list[tuple[int, str]] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child[0])
    return found


def sshd_tree(node: SshNode) -> list[int]:
    """The node's listening sshd and every sshd process below it (one or two per
    connection: the privilege-separation monitor and the session), not the
    commands they run."""
    assert node.proc is not None, f"{node.name}: sshd not started"
    return [node.proc.pid] + [pid for pid, comm in descendants(node.proc.pid) if comm.startswith("sshd")]


def signal_pids(pids: list[int], sig: signal.Signals) -> list[int]:
    """Send `sig` to each pid that still exists; the pids it reached."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            reached.append(pid)
        except ProcessLookupError:
            pass
    return reached


# ----------------------------------------------------------------- nodes


class TunedNode(SshNode):
    """An SshNode whose sshd_config lines are overridden, e.g. {"MaxStartups": "10:30:60"}."""

    def __init__(self, name: str, root: Path, card: Card | None, options: dict[str, str]) -> None:
        super().__init__(name, root, card)
        self.options = options

    def prepare(self) -> None:
        super().prepare()
        lines = [line for line in self.config.read_text().splitlines() if line.split(" ", 1)[0] not in self.options]
        lines += [f"{key} {value}" for key, value in self.options.items()]
        self.config.write_text("\n".join(lines) + "\n")


def netns_works() -> str | None:
    """None when network namespaces can be made here, else why not."""
    ip = shutil.which("ip")
    if ip is None:
        return "no `ip` command (Debian package iproute2)"
    name = f"farmprobe{os.getpid()}"
    done = subprocess.run([ip, "netns", "add", name], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"`ip netns add` failed: {done.stderr.strip()}"
    subprocess.run([ip, "netns", "del", name], capture_output=True, check=False)
    return None


class NetnsNode(SshNode):
    """An sshd in its own network namespace, reached over a veth pair.

    The farm side of the pair is 10.213.X.1/30 in the test's own namespace, the
    node side 10.213.X.2/30 inside NS (X from the pid: a private range that
    exists only inside this sandbox). `cut()` takes the node's side of the link
    down: the farm's packets then vanish without a reset, like a pulled cable.
    """

    def __init__(self, name: str, root: Path, card: Card | None) -> None:
        super().__init__(name, root, card)
        tag = os.getpid()
        subnet = 1 + tag % 250
        self.netns = f"farmtest{tag}"
        self.host_if = f"fth{tag}"[:15]
        self.node_if = f"ftn{tag}"[:15]
        self.host_addr = f"10.213.{subnet}.1"
        self.node_addr = f"10.213.{subnet}.2"
        self._network = False

    @property
    def known_hosts_name(self) -> str:
        return f"[{self.node_addr}]:{self.port}"

    def prepare(self) -> None:
        super().prepare()
        text = self.config.read_text().replace(f"ListenAddress {LOOPBACK}", f"ListenAddress {self.node_addr}")
        self.config.write_text(text)

    def _ip(self, *args: str) -> None:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"`ip {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")

    def start(self, timeout: float = 15.0) -> None:
        if not self._network:
            self._ip("netns", "add", self.netns)
            self._network = True
            self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.node_if)
            self._ip("link", "set", self.node_if, "netns", self.netns)
            self._ip("addr", "add", f"{self.host_addr}/30", "dev", self.host_if)
            self._ip("link", "set", self.host_if, "up")
            self._ip("-n", self.netns, "addr", "add", f"{self.node_addr}/30", "dev", self.node_if)
            self._ip("-n", self.netns, "link", "set", self.node_if, "up")
            self._ip("-n", self.netns, "link", "set", "lo", "up")
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self._log_handle = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        # `ip netns exec` execs sshd: self.proc's pid is the listener's
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, SSHD, "-D", "-e", "-f", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd in {self.netns} exited: {self.log.read_text(errors='replace')[-2000:]}")
            if self.accepts():
                return
            time.sleep(0.05)
        raise RuntimeError(f"sshd in {self.netns} never listened on {self.node_addr}:{self.port}")

    def accepts(self) -> bool:
        try:
            with socket.create_connection((self.node_addr, self.port), timeout=1.0) as sock:
                return sock.recv(8).startswith(b"SSH-")
        except OSError:
            return False

    def cut(self) -> None:
        self._ip("-n", self.netns, "link", "set", self.node_if, "down")

    def cut_one_way(self) -> None:
        """The node's packets to the farm vanish (a blackhole route on its side); the farm's still
        reach it: TCP keeps the farm's connection open, as after a one-way partition."""
        self._ip("-n", self.netns, "route", "add", "blackhole", f"{self.host_addr}/32")

    def drop_large_from_node(self, size: int = 1200) -> None:
        """Packets the node sends over `size` bytes vanish (a tbf qdisc whose bucket is smaller than
        them drops them on the node's side of the link): a path-MTU black hole toward the farm, where
        the handshake and small messages pass and whatever fills a full-size segment stalls."""
        tbf = ["root", "tbf", "rate", "10gbit", "burst", str(size), "limit", "1000000"]
        done = subprocess.run(["tc", "-n", self.netns, "qdisc", "add", "dev", self.node_if, *tbf], capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"`tc qdisc add ... tbf` failed: {done.stderr.decode(errors='replace').strip()}")

    def stop(self) -> None:
        super().stop()
        if self._network:
            # deleting the namespace destroys its end of the pair, and so the pair
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
            subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, check=False)
            self._network = False

    def farm_entry(self, workdir: Path, **overrides: object) -> dict[str, object]:
        return super().farm_entry(workdir, **{"host": self.node_addr, **overrides})


@contextlib.contextmanager
def started_netns_node(name: str, root: Path, card: Card | None = CARDS["t4"]) -> Iterator[NetnsNode]:
    """A NetnsNode started for a test, stopped after it (each test file names its own: two files'
    tests run at once under xdist, each in namespaces of its node's name)."""
    why = netns_works()
    assert why is None, f"network namespaces are not usable here ({why}): CI runs as root with iproute2"
    node = NetnsNode(name, root, card)
    node.prepare()
    node.start()
    try:
        yield node
    finally:
        node.stop()


class Tmpfs:
    """A tmpfs of `size` (and at most `inodes` files) mounted at `path` (root only);
    unmount() in teardown."""

    def __init__(self, path: Path, size: str, inodes: int | None = None) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"cannot mount a {size} tmpfs at {path}: {done.stderr.strip()}")
        self.mounted = True

    def unmount(self) -> None:
        if self.mounted:
            done = subprocess.run(["umount", str(self.path)], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)
            self.mounted = False
