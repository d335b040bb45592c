"""A simulated fleet (issue 5): real sshd nodes on loopback, sleep-based jobs.

Every node is its own `/usr/sbin/sshd` on 127.0.0.1 with its own host key,
client key and known_hosts, and an nvidia-smi stand-in (a Tesla T4) on its PATH
(tests/nodes.py). Each node gets K jobs (variants of one kernel) whose build is
`sleep B && cp /bin/true {binary}` and whose run is `{binary} R` (a script that
sleeps R s and prints PASS), so with `build_jobs` build slots and one GPU per node the critical path
is known: when R >= B and build_jobs >= 2 the GPU is never idle after the first
build, so a node needs B + K*R, and the nodes run side by side.

Side by side in one run it measures:

1. the farm's wall time over the critical path for N = 1, 8, 32, 64 nodes;
2. orchestration time per cell beyond the commands' own time;
3. a plain serial OpenSSH loop doing the same build+run per node and job;
4. ReFrame's ssh scheduler against the same nodes and commands;
5. a warm rerun (nothing changed) of the N=128 farm (`--warm-size`; else the largest): build seconds and bytes shipped;
6. the orchestrator's peak RSS at 64 nodes x 50 variants (`farm verify --all`).

    PYTHONPATH=. python3 bench/fleet.py            # everything, a few minutes on 2 cores
    PYTHONPATH=. python3 bench/fleet.py --sizes 1,8 --no-reframe --no-memory

ReFrame is run from its own virtual environment, made on first use (--reframe, default
/tmp/rfm-venv/bin/reframe; `python3 -m venv /tmp/rfm-venv &&
/tmp/rfm-venv/bin/pip install reframe-hpc`), so it does not touch the farm's.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import os
import platform
import re
import resource
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from nodes import CARDS, Fleet, SshNode  # noqa: E402

from orchestrator.config.farm import load_farm  # noqa: E402
from orchestrator.plan import plan_cells  # noqa: E402
from orchestrator.run.scheduler import run_cells  # noqa: E402
from orchestrator.run.summary import RunSummary  # noqa: E402
from orchestrator.store.database import Store  # noqa: E402
from orchestrator.transport import ssh  # noqa: E402, F401 - imported here as the rest is: no run pays the import

# The probe needs a working nvcc; the GPU machine keeps it in CUDA's own bin folder.
NVCC = shutil.which("nvcc") or "/usr/local/bin/nvcc"
KERNEL = "fleet"
PASS = "fleet: PASS"
TARGETS = {8: 1.05, 64: 1.10, 128: 1.10, 256: 1.20}
DELAYED_TARGETS = {8: 1.10}
CPU_PER_CELL_MS = 5.0
OVERHEAD_TARGET_MS = 50.0
MEMORY_TARGET_MB = 300.0


def kernel_build(binary: str = "{binary}") -> str:
    """The commands that make the stand-in "kernel" from its source, kernels/fleet.txt: a
    script printing the pass marker (a run's marker must come from what it runs: farm.yaml
    refuses a run command whose own text the marker matches; and a build must name its
    {sources})."""
    return f"cat {{sources}} > {binary} && chmod +x {binary}"


# the kernel spends its run time itself (`{binary} R`), as a real one does: a run of kernel
# commands alone, which the node's runner hands the kernel's files without a trampoline
KERNEL_SCRIPT = f'#!/bin/sh\n[ -z "$1" ] || sleep "$1"\necho "{PASS}"\n'


# ------------------------------------------------------------------ farm files


def write_farm(
    root: Path,
    nodes: list[SshNode],
    variants: int,
    build: str,
    run: str,
    build_jobs: int,
    ports: dict[str, int] | None = None,
    processes: str = "auto",
) -> Path:
    """farm.yaml + jobs/fleet.yaml + kernels/fleet.txt under `root`; `ports`
    sends a node's connections to another port (its delay proxy)."""
    (root / "jobs").mkdir(parents=True, exist_ok=True)
    (root / "kernels").mkdir(exist_ok=True)
    (root / "kernels" / "fleet.txt").write_text(KERNEL_SCRIPT)  # the build copies it into {binary}
    job = {
        "kernel": KERNEL,
        "description": "sleep-based build and run of known durations",
        "sources": ["kernels/fleet.txt"],
        "pass_marker": PASS,
        "refusal_marker": "fleet: REFUSED",
        "timeout": 60,
        "build_timeout": 60,
        "variants": {
            f"j{i:02d}": {
                "build": build,
                "run": run,
                "inspect": "cat {binary} > /dev/null",
                "instructions": {},
                "cc": {"min": "7.5"},
            }
            for i in range(variants)
        },
    }
    (root / "jobs" / f"{KERNEL}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    farm = {
        "database": "sqlite:///results.db",
        "reports": "reports",
        "jobs": "jobs",
        "processes": int(processes) if processes.isdigit() else processes,
        "nodes": {
            node.name: node.farm_entry(
                root / f"work-{node.name}",
                build_jobs=build_jobs,
                nvcc=NVCC,
                **({"port": ports[node.name]} if ports and node.name in ports else {}),
            )
            for node in nodes
        },
    }
    path = root / "farm.yaml"
    path.write_text(yaml.safe_dump(farm, sort_keys=False))
    return path


# --farm-cpus: the farm's own CPUs, and the command prefix that puts a process on the others
FARM_CPUS: set[int] = set()
NODE_SIDE: list[str] = []


def pin_threads(cpus: set[int]) -> None:
    """This process, every thread of it, onto CPUS (a thread's affinity is its own on Linux)."""
    for task in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(task), cpus)


def start_delay_proxy(nodes: list[SshNode], rtt_ms: float) -> tuple[subprocess.Popen, dict[str, int]]:
    """bench/delay_proxy.py in front of each node's sshd (half the round trip each
    way); each node's known_hosts also names its proxy port, so host keys stay strict."""
    proxy = subprocess.Popen(
        [
            *NODE_SIDE,  # on the nodes' CPUs (--farm-cpus): the proxy stands for the network
            sys.executable,
            str(REPO / "bench" / "delay_proxy.py"),
            "--delay-ms",
            str(rtt_ms / 2),
            *(str(node.port) for node in nodes),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdout is not None
    said = proxy.stdout.readline().split()
    if len(said) != len(nodes) + 1 or said[0] != "ready":
        proxy.kill()
        raise RuntimeError(f"the delay proxy did not start ({' '.join(said)!r})")
    ports = {node.name: int(port) for node, port in zip(nodes, said[1:], strict=True)}
    for node in nodes:
        line = f"[127.0.0.1]:{ports[node.name]} {node.host_public_key}\n"
        if line not in node.known_hosts.read_text():
            with node.known_hosts.open("a") as handle:
                handle.write(line)
    return proxy, ports


def measured_rtt(node: SshNode, port: int) -> float:
    """Seconds of one TCP connect through the proxy (a SYN/SYN-ACK is local to it; the
    first banner byte has to come through: one one-way delay from sshd)."""
    import socket

    clock = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.recv(1)
    return time.monotonic() - clock


def farm_cpu() -> float:
    """CPU seconds of the farm so far: this process, its reaped children (the `git`
    calls of a run's provenance; the nodes' sshds are children too, but are reaped
    only at the end of the bench), and multiprocessing's fork server with the
    worker processes it forked and reaped (it lives on, so it is read from /proc)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + forkserver_cpu()


def forkserver_cpu() -> float:
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime, then cutime, cstime: its own and its reaped children's (the workers)
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / tick, sum(fields) / tick


def retried(root: Path) -> str:
    """The run's infra attempts (each a retry, or a node given up on): a node
    that retried a cell waited a second or more first, so its chain was longer."""
    db = sqlite3.connect(root / "results.db")
    try:
        rows = db.execute("SELECT status, stage, error FROM attempts WHERE status = 'infra'").fetchall()
    finally:
        db.close()
    if not rows:
        return "retried attempts 0"
    return f"retried attempts {len(rows)} (first: {rows[0][1]}: {str(rows[0][2])[:160]})"


def node_spans(root: Path, run_id: int) -> str:
    """Where a run's time over its critical path went, per node, from its results.db: from
    the run's start to the node's first cell (connect, probe, stage), and from the node's
    last cell's end to the run's end (median / p90 / max over the nodes, in ms)."""
    db = sqlite3.connect(root / "results.db")
    try:
        start, end = db.execute("SELECT started_at, ended_at FROM runs WHERE id = ?", (run_id,)).fetchone()
        rows = db.execute(
            "SELECT node, MIN(started_at), MAX(ended_at) FROM results WHERE run_id = ? GROUP BY node", (run_id,)
        ).fetchall()
    finally:
        db.close()
    if not rows or start is None or end is None:
        return "node spans: none"
    at = datetime.datetime.fromisoformat

    def spread(values: list[float]) -> str:
        values = sorted(values)
        picks = (values[0], values[len(values) // 2], values[int(len(values) * 0.9)], values[-1])
        return " / ".join(f"{v:.0f}" for v in picks)

    first = [(at(a) - at(start)).total_seconds() * 1000 for _, a, _ in rows]
    last = [(at(end) - at(b)).total_seconds() * 1000 for _, _, b in rows]
    span = [(at(b) - at(a)).total_seconds() * 1000 for _, a, b in rows]
    return (
        f"ms min / median / p90 / max over nodes: run start to first cell {spread(first)}, "
        f"first cell to last cell's end {spread(span)}, last cell's end to run end {spread(last)} "
        f"(after the run's last cell: {min(last):.0f})"
    )


def all_passed(summary: RunSummary, cells: int, label: str, failed: list[str]) -> bool:
    """A run whose cells did not all pass measures nothing: say so, and print no ratio."""
    passed = summary.outcomes.get("pass", 0)
    if passed == cells and sum(summary.outcomes.values()) == cells:
        return True
    print(f"{label}: NOT ALL PASS ({passed}/{cells}: {dict(summary.outcomes)}); no ratio")
    for _, result, _ in summary.results:
        if result.verdict is not None and result.verdict.outcome.value != "pass":
            print(f"  first: {result.cell.node}/{result.cell.variant}: {result.verdict.reason[:300]}")
            break
    failed.append(label)
    return False


def farm_run(farm_file: Path, cache: Path) -> RunSummary:
    farm = load_farm(farm_file)
    cells = plan_cells(farm, None, None)
    store = Store(farm.database_url)
    try:
        return run_cells(farm, store, cells, cache_dir=cache, trigger="bench")
    finally:
        store.close()


# ------------------------------------------------------------------ baselines


def ssh_command(node: SshNode, remote: str, port: int | None = None) -> list[str]:
    """OpenSSH to a test node, strict host keys, as a user's script would call it."""
    return [
        "ssh",
        "-i",
        str(node.client_key),
        "-o",
        f"UserKnownHostsFile={node.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-p",
        str(port or node.port),
        f"{node.user}@127.0.0.1",
        remote,
    ]


def floor_run(farm_file: Path, jobs: int, b: float, r: float, root: Path) -> tuple[float, list[str]]:
    """The least the farm's own SSH could pay on this machine: every node of the farm
    at once, one connection each through the farm's transport (strict host keys,
    as the farm connects), running the critical path's own commands in one shell
    (one build, then the K runs one after another). Nothing is probed, shipped,
    inspected or stored. Returns the wall, from before the farm file is read, and
    the nodes whose output lacked a PASS per job."""
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.transport import transport_for

    clock = time.monotonic()
    farm = load_farm(farm_file)
    runs = " && ".join(f"sleep {r} && ./j && echo '{PASS}'" for _ in range(jobs))

    def one(name: str) -> bool:
        transport = transport_for(name, farm.nodes[name])
        try:
            transport.open()
            work = root / f"floor-{name}"
            result = transport.run(
                f"mkdir -p {work} && cd {work} && sleep {b} && cp /bin/true ./j && {runs}", timeout=120
            )
            return result.exit_code == 0 and result.stdout.count(PASS) == jobs
        finally:
            transport.close()

    with ThreadPoolExecutor(max_workers=len(farm.nodes)) as pool:
        passed = dict(zip(farm.nodes, pool.map(one, farm.nodes), strict=True))
    return time.monotonic() - clock, [name for name, ok in passed.items() if not ok]


def serial_loop(nodes: list[SshNode], jobs: int, b: float, r: float, root: Path) -> float:
    """What a user would script: one ssh per (node, job), build then run, one after another."""
    clock = time.monotonic()
    for node in nodes:
        work = root / f"serial-{node.name}"
        for j in range(jobs):
            remote = (
                f"mkdir -p {work} && cd {work} && sleep {b} && cp /bin/true ./j{j:02d} && "
                f"sleep {r} && ./j{j:02d} && echo '{PASS}'"
            )
            out = subprocess.run(
                ssh_command(node, remote),
                capture_output=True,
                text=True,
                check=False,
            )
            if PASS not in out.stdout:
                raise RuntimeError(f"serial loop: {node.name} j{j}: rc={out.returncode} {out.stderr[-300:]}")
    return time.monotonic() - clock


REFRAME_TEST = """
import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, sanity_function


@rfm.simple_test
class FleetJob(rfm.RunOnlyRegressionTest):
    jobno = parameter(range(int(os.environ["FLEET_JOBS"])))
    valid_systems = ["fleet"]
    valid_prog_environs = ["builtin"]
    executable = "sh"

    def __init__(self):
        b, r = os.environ["FLEET_BUILD"], os.environ["FLEET_RUN"]
        script = f"sleep {b} && cp /bin/true ./bin && sleep {r} && ./bin && echo 'fleet: PASS'"
        self.executable_opts = ["-c", '"' + script + '"']

    @sanity_function
    def validate(self):
        return sn.assert_found(r"fleet: PASS", self.stdout)
"""


def reframe_run(
    reframe: str, nodes: list[SshNode], jobs: int, b: float, r: float, root: Path
) -> tuple[float, int, str]:
    """ReFrame's ssh scheduler: one partition per node (max_jobs 1: one GPU), one test per job.

    Returns (wall seconds, tests passed, tail of the output)."""
    root.mkdir(parents=True, exist_ok=True)
    ssh_config = root / "ssh_config"
    ssh_config.write_text(
        "".join(
            f"Host fleet-{n.name}\n  HostName 127.0.0.1\n  Port {n.port}\n  User {n.user}\n"
            f"  IdentityFile {n.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {n.known_hosts}\n"
            f"  StrictHostKeyChecking yes\n  BatchMode yes\n"
            for n in nodes
        )
    )
    partitions = [
        {
            "name": n.name.replace("-", "_"),
            "scheduler": "ssh",
            "launcher": "local",
            "environs": ["builtin"],
            "access": [f"-F {ssh_config}"],
            "max_jobs": 1,
            "sched_options": {"ssh_hosts": [f"fleet-{n.name}"]},
        }
        for n in nodes
    ]
    config = {
        "systems": [{"name": "fleet", "descr": "loopback sshd fleet", "hostnames": [".*"], "partitions": partitions}],
        "environments": [{"name": "builtin", "cc": "cc", "cxx": "c++", "ftn": ""}],
    }
    (root / "config.py").write_text(f"site_configuration = {config!r}\n")
    (root / "fleet_check.py").write_text(REFRAME_TEST)
    # its log (in TMPDIR) and ~/.reframe/reports stay under `root`; ssh itself reads only the -F file
    (root / "home").mkdir(exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, FLEET_JOBS=str(jobs), FLEET_BUILD=str(b), FLEET_RUN=str(r))
    env.update(HOME=str(root / "home"), TMPDIR=str(root / "tmp"))
    env.pop("PYTHONPATH", None)
    command = [
        reframe,
        "-C",
        str(root / "config.py"),
        "-c",
        str(root / "fleet_check.py"),
        "--system",
        "fleet",
        "--prefix",
        str(root / "rfm"),
        "-r",
    ]
    clock = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=False, cwd=root)
    wall = time.monotonic() - clock
    text = out.stdout + out.stderr
    ran = re.search(r"Ran (\d+)/(\d+) test case\(s\).*?\((\d+) failure", re.sub(r"\x1b\[[0-9;]*m", "", text))
    passed = int(ran.group(1)) - int(ran.group(3)) if ran else 0
    return wall, passed, text[-3000:]


def peak_rss_of_verify(farm_file: Path, cache: Path) -> tuple[float, float, int]:
    """(peak RSS MiB, wall s, exit code) of `farm verify --all --no-report` as a child."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=path)
    clock = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "verify", "--all", "--config", str(farm_file), "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=REPO,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024, time.monotonic() - clock, proc.returncode


# ------------------------------------------------------------------ main


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,8,32,64", help="node counts for the farm's cold runs")
    ap.add_argument("--jobs", type=int, default=6, help="jobs (variants) per node")
    ap.add_argument("--build", type=float, default=0.5, help="seconds each build sleeps")
    ap.add_argument("--run", type=float, default=1.0, help="seconds each run sleeps")
    ap.add_argument("--build-jobs", type=int, default=2, help="build_jobs of every node")
    ap.add_argument("--baseline-nodes", type=int, default=8, help="nodes for the serial loop and ReFrame")
    ap.add_argument("--reframe", default="/tmp/rfm-venv/bin/reframe")
    ap.add_argument("--no-reframe", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-floor", action="store_true", help="no floor run (one ssh per node) beside each size")
    ap.add_argument("--real-home", action="store_true", help="keep the login's own HOME (and its ~/.bashrc)")
    ap.add_argument("--mem-nodes", type=int, default=64)
    ap.add_argument("--mem-variants", type=int, default=50)
    ap.add_argument("--delay-ms", type=float, default=50.0, help="round-trip delay of the delayed runs")
    ap.add_argument("--processes", default="auto", help="farm.yaml's processes (worker processes for the nodes)")
    ap.add_argument(
        "--runner",
        choices=["auto", "cell", "shell"],
        default="auto",
        help="each node's runner: its resident python3 (auto), a python3 per cell, or shell",
    )
    ap.add_argument(
        "--hide-driver",
        action="store_true",
        help="on a GPU machine, as root: each node's sshd in a mount namespace without /dev/nvidia* (no CUDA query)",
    )
    ap.add_argument(
        "--farm-cpus",
        default="",
        help="CPUs (e.g. 0,1) for the farm's process, its workers and the baselines' clients; the nodes' "
        "sshds (and all they start) and the delay proxies get the others: a farm host of that many cores "
        "whose nodes are machines of their own",
    )
    ap.add_argument("--warm-size", type=int, default=0, help="cold run to rerun warm (default 128, else the largest)")
    ap.add_argument(
        "--delayed-sizes", default="8", help="node counts run again through the delay proxy ('' or 0 for none)"
    )
    args = ap.parse_args()
    os.environ["FARM_TEST_RUNNER"] = args.runner  # tests/nodes.py puts it into every node's entry
    if args.hide_driver:
        os.environ["FARM_TEST_HIDE_DRIVER"] = "1"
    everything = os.sched_getaffinity(0)
    if args.farm_cpus:
        FARM_CPUS.update(int(c) for c in args.farm_cpus.split(","))
        nodes_cpus = everything - FARM_CPUS
        if not everything >= FARM_CPUS or not nodes_cpus:
            print(f"error: --farm-cpus {args.farm_cpus}: this process may use {sorted(everything)}", file=sys.stderr)
            return 2
        NODE_SIDE[:] = ["taskset", "-c", ",".join(map(str, sorted(nodes_cpus)))]
        pin_threads(nodes_cpus)  # the sshds started next inherit the nodes' CPUs
    if not os.access(NVCC, os.X_OK):
        print(f"error: no nvcc on PATH (nor {NVCC}): the nodes' probe needs one", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    delayed = [int(s) for s in args.delayed_sizes.split(",") if s and int(s) > 0]
    failed: list[str] = []  # runs whose cells did not all pass: no ratio is printed for them
    k, b, r = args.jobs, args.build, args.run
    if r < b or args.build_jobs < 2:
        print("note: with run < build or build_jobs < 2 the GPU idles; the critical path below is a lower bound")
    crit = b + k * r  # per node; nodes are independent
    fleet_size = max([*sizes, *delayed, args.baseline_nodes, 0 if args.no_memory else args.mem_nodes])
    build = f"sleep {b} && {kernel_build()}"
    run = f"{{binary}} {r}"

    tmp = Path(tempfile.mkdtemp(prefix="farm-fleet-"))
    fleet = Fleet(tmp / "nodes")
    before_rfm = set(Path("/tmp").glob("rfm.*"))
    rows: list[tuple[str, str, str, str]] = []
    try:
        clock = time.monotonic()
        for i in range(fleet_size):
            node = fleet.add(f"n{i:02d}", CARDS["t4"], start=False)
            if args.real_home:
                # the login's HOME is an empty folder of the node's own (tests/nodes.py): root's
                # ~/.bashrc here (pyenv init) costs ~90 ms per command sshd runs; this measures it
                node.config.write_text(node.config.read_text().replace(f"SetEnv HOME={node.home} ", "SetEnv "))
            node.start()
        nodes = list(fleet.nodes.values())
        print(
            f"{fleet_size} sshd nodes started in {time.monotonic() - clock:.1f} s (one sshd each; "
            f"HOME {'real' if args.real_home else 'empty'})"
        )
        if FARM_CPUS:
            pin_threads(FARM_CPUS)  # the farm, its workers (forked from it) and the baselines' clients
            print(
                f"farm on CPUs {sorted(FARM_CPUS)}; the nodes (their sshds and all they start) and the delay "
                f"proxies on the other {len(everything - FARM_CPUS)}"
            )

        # 1 + 2: cold farm runs
        overhead_at = {}
        last_root = None
        roots: dict[int, tuple[Path, Path, int]] = {}
        for i, n in enumerate(sizes):
            root = tmp / f"farm-{n}-{i}"  # a size given twice is cold twice
            farm_file = write_farm(root, nodes[:n], k, build, run, args.build_jobs, processes=args.processes)
            cpu0, busy0 = farm_cpu(), machine_cpu()[0]
            s = farm_run(farm_file, root / "archives")
            own_cpu, busy = farm_cpu() - cpu0, machine_cpu()[0] - busy0
            floor = None
            if not args.no_floor:  # side by side, after the farm: what the floor leaves behind never slows the farm
                floor, bad = floor_run(farm_file, k, b, r, tmp / f"floor-{n}-{i}")
                if bad:
                    print(f"N={n} floor: NOT ALL PASS on {', '.join(bad)}; no ratio")
                    failed.append(f"floor N={n}")
                    floor = None
            cells = n * k
            if not all_passed(s, cells, f"N={n}", failed):
                continue
            ratio = s.wall_seconds / crit
            per_cell = (s.wall_seconds - crit) / cells * 1000
            bi = s.stage_seconds["build"] + s.stage_seconds["inspect"] - cells * b
            runx = s.stage_seconds["run"] - cells * r
            overhead_at[n] = per_cell
            print(
                f"N={n:3d}: {cells} cells, wall {s.wall_seconds:.2f} s, critical path {crit:.2f} s, ratio {ratio:.3f}, "
                f"(wall-cp)/cells {per_cell:.1f} ms; stage sums - sleeps per cell: build+inspect "
                f"{bi / cells * 1000:.1f} ms, run (incl. GPU-slot wait) {runx / cells * 1000:.1f} ms; "
                f"probe {s.stage_seconds['probe']:.1f} s, stage {s.stage_seconds['stage']:.1f} s (node sums); "
                f"CPU: farm processes {own_cpu:.1f} s ({own_cpu / cells * 1000:.1f} ms per cell), "
                f"whole machine busy {busy:.1f} s of {os.cpu_count() * s.wall_seconds:.1f}; {retried(root)}"
            )
            print(f"N={n:3d} {node_spans(root, s.run_id)}")
            if floor is not None:
                print(
                    f"N={n:3d} floor (the farm's SSH, one command per node: the critical path's in one shell): "
                    f"wall {floor:.2f} s, "
                    f"ratio {floor / crit:.3f}; farm / floor {s.wall_seconds / floor:.3f}"
                )
                rows.append(
                    (
                        f"floor wall / critical path, N={n}: one command per node, nothing probed, shipped or stored",
                        f"{floor:.2f} s / {crit:.2f} s = {floor / crit:.3f}; "
                        f"farm / floor = {s.wall_seconds / floor:.3f}",
                        "",
                        "",
                    )
                )
            target = TARGETS.get(n)
            rows.append(
                (
                    f"farm wall / critical path, N={n} ({cells} cells)",
                    f"{s.wall_seconds:.2f} s / {crit:.2f} s = {ratio:.3f} (CPU busy {busy / s.wall_seconds:.1f} cores, "
                    f"farm processes {own_cpu / s.wall_seconds:.1f})",
                    f"<= {target:.2f}" if target else "",
                    ("met" if ratio <= target else f"missed by {ratio - target:.3f}") if target else "",
                )
            )
            rows.append(
                (
                    f"farm CPU per cell (its workers included), N={n}",
                    f"{own_cpu / cells * 1000:.1f} ms",
                    f"<= {CPU_PER_CELL_MS:.0f} ms",
                    f"{own_cpu / cells * 1000 / CPU_PER_CELL_MS:.2f}x of target",
                )
            )
            rows.append(
                (
                    f"orchestration per cell, N={n}: (wall - cp) / cells; stage sums - sleeps (b+i / run)",
                    f"{per_cell:.1f} ms; {bi / cells * 1000:.1f} / {runx / cells * 1000:.1f} ms",
                    f"<= {OVERHEAD_TARGET_MS:.0f} ms",
                    f"{per_cell / OVERHEAD_TARGET_MS:.2f}x of target",
                )
            )
            last_root = (root, farm_file, n)
            roots[n] = last_root

        # 1b: the same farm across a network: every node behind a delaying proxy
        for n in delayed:
            proxy, ports = start_delay_proxy(nodes[:n], args.delay_ms)
            try:
                rtt = measured_rtt(nodes[0], ports[nodes[0].name])
                root = tmp / f"farm-{n}-delayed"
                farm_file = write_farm(
                    root, nodes[:n], k, build, run, args.build_jobs, ports=ports, processes=args.processes
                )
                s = farm_run(farm_file, root / "archives")
                floor = None
                if not args.no_floor:  # through the same proxies: the round trips one SSH command per node pays
                    floor, bad = floor_run(farm_file, k, b, r, tmp / f"floor-{n}-delayed")
                    if bad:
                        print(f"N={n} delayed floor: NOT ALL PASS on {', '.join(bad)}; no ratio")
                        failed.append(f"delayed floor N={n}")
                        floor = None
            finally:
                proxy.terminate()
                proxy.wait()
            label = f"N={n} (+{args.delay_ms:g} ms RTT)"
            if not all_passed(s, n * k, label, failed):
                continue
            ratio = s.wall_seconds / crit
            print(
                f"{label}: {n * k} cells, wall {s.wall_seconds:.2f} s, critical path {crit:.2f} s, ratio {ratio:.3f} "
                f"(proxy's first byte after {rtt * 1000:.0f} ms)"
            )
            if floor is not None:
                print(
                    f"{label} floor (one command per node through the proxies): wall {floor:.2f} s, "
                    f"ratio {floor / crit:.3f}; farm / floor {s.wall_seconds / floor:.3f}"
                )
                rows.append(
                    (
                        f"floor wall / critical path, {label}: one command per node",
                        f"{floor:.2f} s / {crit:.2f} s = {floor / crit:.3f}; "
                        f"farm / floor = {s.wall_seconds / floor:.3f}",
                        "",
                        "",
                    )
                )
            target = DELAYED_TARGETS.get(n)
            rows.append(
                (
                    f"farm wall / critical path, {label}",
                    f"{s.wall_seconds:.2f} s / {crit:.2f} s = {ratio:.3f}",
                    f"<= {target:.2f}" if target else "",
                    ("met" if ratio <= target else f"missed by {ratio - target:.3f}") if target else "",
                )
            )

        # 5: warm rerun of the N=128 farm (--warm-size), else of the largest
        w = None
        warm_size = args.warm_size or (128 if 128 in roots else None)
        if warm_size in roots:
            last_root = roots[warm_size]
        if last_root is not None:
            root, farm_file, n = last_root
            w = farm_run(farm_file, root / "archives")
            cached = sum(1 for _, res, _ in w.results if res.build_cached)
            if not all_passed(w, n * k, f"warm N={n}", failed):
                w = None
        if last_root is not None and w is not None:
            print(
                f"warm N={n}: wall {w.wall_seconds:.2f} s, build stage {w.stage_seconds['build']:.2f} s summed over "
                f"{n * k} cells ({cached} cached), bytes shipped {w.bytes_shipped}, outcomes {dict(w.outcomes)}"
            )
            rows.append(
                (
                    f"warm rerun N={n}: build seconds summed ({cached}/{n * k} cached)",
                    f"{w.stage_seconds['build']:.2f} s (cold: {n * k * b:.0f} s of sleeps)",
                    "~0",
                    "",
                )
            )
            rows.append(
                (
                    f"warm rerun N={n}: bytes shipped",
                    f"{w.bytes_shipped}",
                    "0",
                    "met" if not w.bytes_shipped else "missed",
                )
            )
            warm_ratio = w.wall_seconds / (crit - b)
            rows.append(
                (
                    f"warm rerun N={n}: wall / run-only critical path",
                    f"{w.wall_seconds:.2f} s / {crit - b:.1f} s = {warm_ratio:.3f}",
                    "<= 1.10",
                    "met" if warm_ratio <= 1.10 else f"missed by {warm_ratio - 1.10:.3f}",
                )
            )
            if not args.no_floor:  # its floor: one command per node running the K runs, no build
                wfloor, bad = floor_run(farm_file, k, 0.0, r, tmp / f"floor-warm-{n}")
                if bad:
                    print(f"warm N={n} floor: NOT ALL PASS on {', '.join(bad)}; no ratio")
                    failed.append(f"warm floor N={n}")
                else:
                    print(
                        f"warm N={n} floor (one command per node, the runs only): wall {wfloor:.2f} s, "
                        f"ratio {wfloor / (crit - b):.3f}; farm / floor {w.wall_seconds / wfloor:.3f}"
                    )
                    rows.append(
                        (
                            f"floor wall / run-only critical path, warm N={n}: one command per node",
                            f"{wfloor:.2f} s / {crit - b:.1f} s = {wfloor / (crit - b):.3f}; "
                            f"farm / floor = {w.wall_seconds / wfloor:.3f}",
                            "",
                            "",
                        )
                    )

        # 3: serial ssh loop (--baseline-nodes 0: none, nor ReFrame)
        nb = args.baseline_nodes
        serial = serial_loop(nodes[:nb], k, b, r, tmp / "serial") if nb else 0.0
        sleeps = nb * k * (b + r)
        if nb:
            print(f"serial ssh loop, {nb} nodes x {k} jobs: {serial:.2f} s (sleeps {sleeps:.1f} s)")
            rows.append(
                (
                    f"serial OpenSSH loop, N={nb} ({nb * k} build+run)",
                    f"{serial:.2f} s (sleeps {sleeps:.0f} s; {(serial - sleeps) / (nb * k) * 1000:.0f} ms/job over)",
                    "",
                    "",
                )
            )
        if nb in overhead_at:
            farm_wall = crit + overhead_at[nb] * nb * k / 1000
            rows.append((f"serial loop / farm wall, N={nb}", f"{serial / farm_wall:.1f}x", "", ""))

        # 4: ReFrame
        if not args.no_reframe and nb:
            if not Path(args.reframe).exists():  # ReFrame in a venv of its own, installed on first use
                venv = Path(args.reframe).parent.parent
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "reframe-hpc"], check=True)
            rcrit = k * (b + r)  # max_jobs 1 per partition: build and run of a test cannot overlap
            wall, passed, tail = reframe_run(args.reframe, nodes[:nb], k, b, r, tmp / "reframe")
            tests = nb * k
            rover = (wall - rcrit) / tests * 1000
            print(f"ReFrame ssh scheduler, {nb} partitions x {k} tests: {wall:.2f} s, {passed}/{tests} passed")
            if passed != tests:
                print(tail)
                print(f"ReFrame: NOT ALL PASS ({passed}/{tests}); no ratio")
                failed.append("ReFrame")
            rows.append(
                (
                    f"ReFrame ssh scheduler, N={nb} ({passed}/{tests} passed)",
                    f"{wall:.2f} s (its own critical path {rcrit:.1f} s: max_jobs 1)",
                    "",
                    "",
                )
            )
            if nb in overhead_at and passed == tests:
                ratio = rover / max(overhead_at[nb], 0.1)
                rows.append(
                    (
                        f"overhead per test, ReFrame / farm, N={nb}",
                        f"{rover:.0f} ms / {overhead_at[nb]:.1f} ms = {ratio:.1f}x",
                        ">= 3x",
                        "met" if ratio >= 3 else "missed",
                    )
                )

        # 6: peak memory
        if not args.no_memory:
            mn, mv = args.mem_nodes, args.mem_variants
            root = tmp / "memory"
            farm_file = write_farm(root, nodes[:mn], mv, kernel_build(), "{binary}", 2)
            rss, wall, rc = peak_rss_of_verify(farm_file, root / "cache")
            print(f"memory: farm verify --all, {mn} x {mv} variants: peak RSS {rss:.0f} MiB, {wall:.1f} s, exit {rc}")
            if rc != 0:
                print(f"memory: NOT ALL PASS (farm verify exited {rc}); no ratio")
                failed.append("memory")
            else:
                rows.append(
                    (
                        f"peak RSS of `farm verify --all`, {mn} nodes x {mv} variants (exit {rc}, {wall:.0f} s)",
                        f"{rss:.0f} MiB",
                        f"<= {MEMORY_TARGET_MB:.0f} MB",
                        f"{rss / MEMORY_TARGET_MB:.2f}x of target",
                    )
                )
    finally:
        fleet.stop()
        for path in set(Path("/tmp").glob("rfm.*")) - before_rfm:  # ReFrame's remote stage folders
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"{datetime.date.today()}, {os.cpu_count()} CPUs ({cpu_model()}), Python {platform.python_version()}")
    print(f"command: {' '.join(shlex.quote(a) for a in sys.argv)}; user {getpass.getuser()}")
    print(
        f"jobs per node {k}, build {b} s, run {r} s, build_jobs {args.build_jobs}, 1 GPU per node, "
        f"node runner {args.runner}"
        + (", NVIDIA driver hidden from the nodes" if args.hide_driver else "")
        + (f", farm on CPUs {args.farm_cpus} and the nodes on the others" if args.farm_cpus else "")
    )
    print(f"load average at the end: {os.getloadavg()}")
    print()
    print("| measure | value | target | ratio |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if failed:
        print(f"\nNOT ALL CELLS PASSED in: {', '.join(failed)}; no ratio printed for those runs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
