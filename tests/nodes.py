"""Real OpenSSH test nodes on loopback, each with a stand-in GPU.

Every node is its own `/usr/sbin/sshd -D -e -f CFG` on a free port of
127.0.0.1, with a fresh ed25519 host key, a fresh client key, and a
known_hosts line for `[127.0.0.1]:PORT`, so the farm connects with strict
host-key checking exactly as it would to a real machine. sshd's `SetEnv PATH`
gives each node its own PATH, whose first folder holds the node's `nvidia-smi`
stand-in (or nothing, for a node without a GPU). Everything else (sh, g++,
objdump, timeout, the real nvcc in /usr/local/bin) is the machine's own.

See shared/research/fabric-ssh-pitfalls.md, section 3.
"""

from __future__ import annotations

import base64
import dataclasses
import getpass
import hashlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
LOOPBACK = "127.0.0.1"
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Card:
    """What a node's `nvidia-smi` stand-in reports for one GPU."""

    name: str
    cc: str
    driver: str = "550.54.15"
    memory: str = "15360 MiB"
    ecc: str = "0"  # uncorrectable ECC errors since the driver loaded ("[N/A]": ECC off)
    # where two stand-in nodes of one run must be two machines: cards of one model share a UUID
    # otherwise, and the farm runs one card under one node name only (run/card_claims.py)
    salt: str = ""

    def uuid(self, index: int) -> str:
        seed = f"{self.salt}/{self.name}/{index}" if self.salt else f"{self.name}/{index}"
        digest = hashlib.sha256(seed.encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def csv(self, index: int) -> str:
        return f"{index}, {self.uuid(index)}, {self.name}, {self.cc}, {self.driver}, {self.memory}"


CARDS = {
    "t4": Card("Tesla T4", "7.5", memory="15360 MiB"),
    "a100": Card("NVIDIA A100-SXM4-40GB", "8.0", memory="40960 MiB"),
    "h100": Card("NVIDIA H100 80GB HBM3", "9.0", memory="81559 MiB"),
}


def nvidia_smi_script(cards: Card | list[Card]) -> str:
    """A POSIX sh stand-in answering the queries the farm and the stand-in
    kernels make, for one card or several (GPU 0, 1, ...); `-i INDEX|UUID`
    selects one, as the real one does. Anything else is refused loudly, so a
    new query is noticed."""
    cards = [cards] if isinstance(cards, Card) else cards
    full = "--query-gpu=index,uuid,name,compute_cap,driver_version,memory.total"
    probe = full + ",ecc.errors.uncorrected.volatile.total"  # the probe's: each card's ECC count last
    per_gpu = "\n".join(
        f"""if [ -z "$only" ] || [ "$only" = {i} ] || [ "$only" = {card.uuid(i)} ]; then
  found=yes
  if [ "$query" = {full} ]; then echo '{card.csv(i)}'
  elif [ "$query" = {probe} ]; then echo '{card.csv(i)}, {card.ecc}'
  else echo '{card.cc}'; fi
fi"""
        for i, card in enumerate(cards)
    )
    return f"""#!/bin/sh
# nvidia-smi stand-in for the farm's tests: {", ".join(c.name for c in cards)}
query=""
format=""
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --query-gpu=*) query="$1" ;;
    --format=*) format="$1" ;;
    -i) shift; only="$1" ;;
    --id=*) only="${{1#--id=}}" ;;
  esac
  shift
done
if [ "$format" != "--format=csv,noheader" ]; then
  echo "nvidia-smi stand-in: unsupported arguments" >&2
  exit 2
fi
case "$query" in
  {full}|{probe}|--query-gpu=compute_cap) ;;
  *) echo "nvidia-smi stand-in: unsupported query: $query" >&2; exit 2 ;;
esac
found=no
{per_gpu}
[ "$found" = yes ] || {{ echo "No devices were found" >&2; exit 6; }}
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def fingerprint(public_key_line: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key line ("ssh-ed25519 AAAA...")."""
    blob = base64.b64decode(public_key_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class SshNode:
    """One sshd on loopback; `start()` it, `stop()` it, point farm.yaml at it."""

    def __init__(self, name: str, root: Path, card: Card | list[Card] | None) -> None:
        self.name = name
        self.root = root
        # one card, several (GPU 0, 1, ... of one node), or none
        cards = [] if card is None else ([card] if isinstance(card, Card) else list(card))
        # each node a machine of its own: its cards' UUIDs its own (one card under two node names
        # runs under one: run/card_claims.py), unless a test salts them itself
        self.cards = [c if c.salt else dataclasses.replace(c, salt=name) for c in cards]
        self.card = self.cards[0] if self.cards else None
        self.port = 0
        self.user = getpass.getuser()
        self.node_bin = root / "bin"
        # the login's HOME: a folder of the node's own, empty, so no ~/.bashrc of this machine's
        # (root's runs `pyenv init`: ~85 ms of CPU in every command sshd starts) shapes its commands
        self.home = root / "home"
        self.host_key = root / "host_ed25519"
        self.client_key = root / "client_ed25519"
        self.authorized_keys = root / "authorized_keys"
        self.known_hosts = root / "known_hosts"
        self.config = root / "sshd_config"
        self.pid_file = root / "sshd.pid"
        self.log = root / "sshd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_handle = None
        # a command sshd runs under, given sshd's own command line (a mount namespace of its own)
        self.prefix: list[str] = []

    # set-up ------------------------------------------------------------
    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.node_bin.mkdir(exist_ok=True)
        self.home.mkdir(exist_ok=True)
        if self.card is not None:
            smi = self.node_bin / "nvidia-smi"
            smi.write_text(nvidia_smi_script(self.cards))
            smi.chmod(0o755)
        _keygen(self.host_key, f"farm-test-host-{self.name}")
        _keygen(self.client_key, f"farm-test-client-{self.name}")
        self.authorized_keys.write_text(self.client_key.with_suffix(".pub").read_text())
        self.authorized_keys.chmod(0o600)
        self.port = free_port()
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {LOOPBACK}",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.pid_file}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    "Subsystem sftp internal-sftp",
                    "MaxStartups 64:30:128",
                    "MaxSessions 64",
                    "LogLevel INFO",
                    f"SetEnv HOME={self.home} PATH={self.node_bin}:{BASE_PATH}",
                    "",
                ]
            )
        )
        self.known_hosts.write_text(self.known_hosts_line() + "\n")

    @property
    def host_public_key(self) -> str:
        """ "ssh-ed25519 AAAA..." without the comment."""
        parts = self.host_key.with_suffix(".pub").read_text().split()
        return f"{parts[0]} {parts[1]}"

    @property
    def host_fingerprint(self) -> str:
        return fingerprint(self.host_public_key)

    @property
    def known_hosts_name(self) -> str:
        return f"[{LOOPBACK}]:{self.port}"

    def known_hosts_line(self, public_key: str | None = None) -> str:
        return f"{self.known_hosts_name} {public_key or self.host_public_key}"

    # life --------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> None:
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation
        self._log_handle = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        command = [*self.prefix, SSHD, "-D", "-e", "-f", str(self.config)]
        if os.environ.get("FARM_TEST_HIDE_DRIVER") and os.geteuid() == 0:
            # bench/fleet.py --hide-driver: a stand-in node on a GPU machine sees no NVIDIA driver
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", HIDE_DRIVER, "sh", *command]
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"sshd for test node {self.name!r} exited {self.proc.returncode}: "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=1.0) as sock:
                    banner = sock.recv(256)
                if banner.startswith(b"SSH-2.0-"):
                    return
                last_error = RuntimeError(f"unexpected banner {banner!r}")
            except OSError as err:
                last_error = err
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd for test node {self.name!r} never served a banner ({last_error})")

    def freeze(self) -> None:
        """SIGSTOP the listening sshd: connections are accepted by the kernel,
        but no banner ever comes (a hung machine)."""
        assert self.proc is not None and self.proc.poll() is None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            self.thaw()
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
            self.proc = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def accepts(self) -> bool:
        """Whether anything listens on the node's port now."""
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def farm_entry(self, workdir: Path, **overrides: object) -> dict[str, object]:
        """This node as a farm.yaml `nodes:` entry (ssh, strict host keys)."""
        entry: dict[str, object] = {
            "transport": "ssh",
            "host": LOOPBACK,
            "port": self.port,
            "user": self.user,
            "key_file": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "nvcc": "/usr/local/bin/nvcc",
            "workdir": str(workdir),
            "connect_timeout": 10,
        }
        if self.card is not None:
            entry["gpu"] = self.card.name
            entry["cc"] = self.card.cc
        if os.environ.get("FARM_TEST_RUNNER"):  # the `runners` fixture: each test with both node runners
            entry["runner"] = os.environ["FARM_TEST_RUNNER"]
        entry.update(overrides)
        return entry


def running_node(
    name: str, root: Path, card: Card | list[Card] | None, *, home_files: dict[str, str] | None = None
) -> Iterator[SshNode]:
    """One started sshd node for a one-node fixture to `yield from`, stopped at its teardown.
    `home_files`: path under the login's HOME -> text, written before sshd starts (a ~/.bashrc the
    login reads from its first command on); a text starting with "#!" is made executable (a script)."""
    node = SshNode(name, root, card)
    node.prepare()
    for path, text in (home_files or {}).items():
        file = node.home / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
        if text.startswith("#!"):
            file.chmod(0o755)
    node.start()
    try:
        yield node
    finally:
        node.stop()


def missing_tools() -> list[str]:
    """What this machine lacks to run the loopback fleet (empty when nothing)."""
    missing = []
    for tool in (SSHD, SSH_KEYGEN, "g++", "objdump", "timeout", "/usr/local/bin/nvcc"):
        found = os.access(tool, os.X_OK) if os.path.isabs(tool) else shutil.which(tool)
        if not found:
            missing.append(tool)
    return missing


class Fleet:
    """Several SshNodes started together, stopped together."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes: dict[str, SshNode] = {}

    def add(self, name: str, card: Card | list[Card] | None, *, start: bool = True) -> SshNode:
        node = SshNode(name, self.root / name, card)
        node.prepare()
        self.nodes[name] = node
        if start:
            node.start()
        return node

    def __getitem__(self, name: str) -> SshNode:
        return self.nodes[name]

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


# a /dev of its own for a node's sshd (in its own mount namespace): the usual devices, no nvidia*
HIDE_DRIVER = """set -e
mount -t tmpfs -o mode=755 farm-dev /dev
mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/full c 1 7
mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9; mknod -m 666 /dev/tty c 5 0
mkdir /dev/pts /dev/shm && mount -t tmpfs -o mode=1777 farm-shm /dev/shm
ln -s /proc/self/fd /dev/fd && ln -s fd/0 /dev/stdin && ln -s fd/1 /dev/stdout && ln -s fd/2 /dev/stderr
mount -t tmpfs farm-nvidia /proc/driver 2>/dev/null || true
exec "$@"
"""


def processes_carrying(entry: str) -> list[int]:
    """Every live process whose environment holds `entry` ("NAME=VALUE"), as the
    farm's reap finds them: the node runner puts the run's marker into no command line."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if entry.encode() in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def own_sleep(seconds: int) -> str:
    """`sleep SECONDS.<digits>`, a command line no other test session's process has, for a
    test asking processes_matching whether its kernel outlived the cell. That reads every
    process of the machine, and the farm's tests run in several clones at once (helpers,
    CI): a fixed `sleep 60.731` found another session's kernel still in its 3 s (and the
    shell runner's command shell, whose script names it), and failed a cell that had
    killed its own (every match, under load, was another session's; none its own)."""
    return f"sleep {seconds}.{os.getpid()}{time.monotonic_ns() % 10**6:06d}"


def processes_matching(needle: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose command line contains
    `needle`; read from /proc, so the search itself never matches."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        cmdline = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
        if needle in cmdline:
            found.append((int(entry.name), cmdline))
    return found


SANITIZER_STANDIN = """#!/bin/sh
# compute-sanitizer stand-in (tests/nodes.py): part of the stand-in GPU. It takes
# the real tool's options, runs the program with STANDIN_SANITIZER_TOOL set, and
# writes what the program reports into the real tool's log format: the
# "=========" lines, then the summary, and exits with --error-exitcode when
# anything was reported (else with the program's own code), as the real one does.
tool=memcheck; code=0; log=
while [ $# -gt 0 ]; do
    case "$1" in
        --tool) tool=$2; shift 2 ;;
        --error-exitcode) code=$2; shift 2 ;;
        --print-limit) shift 2 ;;
        --log-file) log=$2; shift 2 ;;
        --*) shift ;;
        *) break ;;
    esac
done
# as the real tool, it needs a temporary folder it can write (exit 13 and these words without one)
report=$(mktemp 2>/dev/null) || {
    echo "Failed to access the temporary directory." > "${log:-/dev/stderr}"; exit 13; }
STANDIN_SANITIZER_TOOL=$tool STANDIN_SANITIZER_REPORT=$report "$@"
rc=$?
n=$(grep -c '^[^ ]' "$report")
{
    echo "========= COMPUTE-SANITIZER"
    sed 's/^/========= /' "$report"
    [ "$tool" = racecheck ] && echo "========= RACECHECK SUMMARY: $n hazards displayed ($n errors, 0 warnings)"
    echo "========= ERROR SUMMARY: $n errors"
} > "${log:-/dev/stderr}"
rm -f "$report"
[ "$n" -gt 0 ] && exit "$code"
exit $rc
"""


def install_sanitizer(node: SshNode) -> Path:
    """Put the compute-sanitizer stand-in on the node's PATH (beside its nvidia-smi stand-in)."""
    path = node.node_bin / "compute-sanitizer"
    path.write_text(SANITIZER_STANDIN)
    path.chmod(0o755)
    return path


# ----------------------------------------------------------------- farm files

STANDIN_SOURCE = Path(__file__).resolve().parent / "standin" / "standin.cpp"
PASS_MARKER = r"standin: PASS"
REFUSAL_MARKER = r"standin needs CC \d+\.\d+ and this device is"


def standin_variant(
    mode: str, contract: dict[str, str], gate: str | None = None, prelude: Path | None = None, **extra: object
) -> dict[str, object]:
    """A job variant that builds tests/standin/standin.cpp with g++ on the node.

    `mode` is a MODE_ macro without its prefix ("PASS", "HANG", ...), `gate` a
    gate macro ("MIN_CC=75", "EXACT_CC=90"), `contract` the variant's `cc:`,
    `prelude` a shell script the kernel runs first, with its own stdout and stderr.
    Inspection is objdump's x86 disassembly, which always holds a `call`.
    """
    flags = f"-DMODE_{mode}" + (f" -D{gate}" if gate else "")
    if prelude is not None:
        flags += f" -DPRELUDE_FILE='\"{prelude}\"'"
    variant: dict[str, object] = {
        "build": f"g++ -O1 {flags} -o {{binary}} {{sources}}",
        "inspect": "objdump -d {binary}",
        "instructions": {"call": 1},
        "cc": contract,
    }
    variant.update(extra)
    return variant


def standin_job(kernel: str, variants: dict[str, dict[str, object]], **extra: object) -> dict:
    job: dict[str, object] = {
        "kernel": kernel,
        "description": "g++-built stand-ins for gated GPU kernels",
        "sources": [f"kernels/{STANDIN_SOURCE.name}"],
        "pass_marker": PASS_MARKER,
        "refusal_marker": REFUSAL_MARKER,
        "timeout": 30,
        "build_timeout": 120,
        "variants": variants,
    }
    job.update(extra)
    return job


def write_farm(
    root: Path,
    nodes: dict[str, dict[str, object]],
    jobs: list[dict],
    **farm_keys: object,
) -> Path:
    """A farm folder at `root`: farm.yaml (database results.db beside it), one
    jobs/KERNEL.yaml per job, kernels/ with the stand-in source. Returns the
    path of farm.yaml."""
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    (root / "kernels").mkdir(exist_ok=True)
    shutil.copyfile(STANDIN_SOURCE, root / "kernels" / STANDIN_SOURCE.name)
    (root / "jobs").mkdir(exist_ok=True)
    for job in jobs:
        (root / "jobs" / f"{job['kernel']}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    farm = {
        "database": "sqlite:///results.db",
        "reports": "reports",
        "jobs": "jobs",
        "nodes": nodes,
        **farm_keys,
    }
    path = root / "farm.yaml"
    path.write_text(yaml.safe_dump(farm, sort_keys=False))
    return path


def query(db: Path, sql: str, *args: object) -> list[sqlite3.Row]:
    """Rows of a results database, by column name (tests assert on what the farm stored)."""
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def landlock_abi() -> int:
    """The Landlock ABI this machine's kernel gives the python runners' confined kernels
    (0: none): at 6 and later their signals stay within their own process tree."""
    from orchestrator.run import noderunner

    rules, _ = noderunner.ruleset(("/",))
    if rules is None:
        return 0
    os.close(rules[0])
    return rules[1]


def smi_on_path(folder: Path, script: str, monkeypatch: object) -> None:
    """An nvidia-smi of `script` (a stand-in card's, or a broken one) first on this
    process's PATH, as a `local` node's probe finds it: folder/bin/nvidia-smi."""
    smi = folder / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(script)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")  # type: ignore[attr-defined]


def lose_card_after_probe(node_bin: Path, flag: Path) -> None:
    """The node's nvidia-smi stand-in answers the probe's call (which leaves `flag`); every later
    call finds no device, as a card that fell off the bus mid-run."""
    smi, real = node_bin / "nvidia-smi", node_bin / "nvidia-smi.real"
    smi.rename(real)
    smi.write_text(
        f'#!/bin/sh\nif [ -e {flag} ]; then echo "No devices were found" >&2; exit 6; fi\n'
        f'touch {flag}\nexec {real} "$@"\n'
    )
    smi.chmod(0o755)
