"""The farm's CPU per remote command: Fabric's runner against the farm's raw channel,
and the farm's connection with paramiko's default cipher against the farm's own.

One real sshd on loopback (tests/nodes.py, strict host keys), one open
connection each; N times `true` through Fabric's runner and the farm's channel,
side by side in one run; then N times a command shaped like a cell's one round
trip (23 KB on stdin, as the node runner's source is; four flushes of 2 KB
back) over paramiko's defaults (AES-CTR + HMAC, Nagle's algorithm on), AES-GCM
with Nagle on, and the farm's connection (AES-GCM, TCP_NODELAY); last, a fresh
connection and its first command, N/10 times, through paramiko's own Transport
and the farm's (which also turns the delayed ACK off before each read).
Prints the farm process's CPU and the wall per command for each, and their
ratios; no ratio when a command did not exit 0 or print what it should.

    PYTHONPATH=. python3 bench/ssh_command.py [--commands 200]
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import paramiko  # noqa: E402
from nodes import CARDS, Fleet  # noqa: E402

from orchestrator.config.farm_spec import NodeSpec  # noqa: E402
from orchestrator.transport import ssh, ssh_tuning, transport_for  # noqa: E402

CELL = "cat > /dev/null; for i in 1 2 3 4; do printf '%2000s\\n' x; done"
CELL_STDIN = b"#" * 23088
CELL_OUT = 4 * 2001


def timed(command, n: int) -> tuple[float, float, set]:
    """(CPU, wall) per command, and what the commands answered."""
    command()  # warm
    cpu, wall = time.process_time(), time.monotonic()
    answers = {command() for _ in range(n)}
    return (time.process_time() - cpu) / n, (time.monotonic() - wall) / n, answers


def connect_and_true(node, tmp: Path) -> int:
    """A fresh connection (handshake, authentication) and its first command."""
    with transport_for("n0", NodeSpec.model_validate(node.farm_entry(tmp / "work"))) as one:
        return one.run("true", timeout=30).exit_code


def cell_command(transport):
    def command() -> tuple[int, int]:
        got = bytearray()
        code = transport.run_streamed(CELL, timeout=30, sink=got.extend, stdin=CELL_STDIN).exit_code
        return code, len(got)

    return command


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commands", type=int, default=200)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="farm-ssh-bench-"))
    fleet = Fleet(tmp / "nodes")
    node = fleet.add("n0", CARDS["t4"], start=False)
    # the node's login has an empty HOME of its own (tests/nodes.py): no rc file run by every command
    node.start()
    try:
        transport = transport_for("n0", NodeSpec.model_validate(node.farm_entry(tmp / "work")))
        transport.open()
        contenders = {
            "Fabric's runner": lambda: (
                transport._conn.run("true", hide=True, warn=True, pty=False, in_stream=False).exited
            ),
            "farm (raw channel)": lambda: transport.run("true", timeout=30).exit_code,
        }
        measured = {}
        for name, command in contenders.items():
            cpu, wall, codes = timed(command, args.commands)
            measured[name] = (cpu, wall)
            print(f"{name}: {cpu * 1000:.2f} ms CPU, {wall * 1000:.1f} ms wall per command")
            if codes != {0}:
                print(f"{name}: NOT ALL EXIT 0 ({codes}); no ratio")
                return 1
        transport.close()
        shaped = {}
        farm_order = ssh_tuning.TunedTransport._preferred_ciphers
        contenders = (
            ("paramiko's defaults (AES-CTR + HMAC, Nagle on)", paramiko.Transport._preferred_ciphers, False),
            ("AES-GCM, Nagle on", farm_order, False),
            ("AES-GCM, TCP_NODELAY (the farm's)", farm_order, True),
        )
        for name, order, no_delay in contenders:
            ssh_tuning.TunedTransport._preferred_ciphers = order
            try:
                one = transport_for("n0", NodeSpec.model_validate(node.farm_entry(tmp / "work")))
                one.open()
            finally:
                ssh_tuning.TunedTransport._preferred_ciphers = farm_order
            sock = one._conn.transport.sock
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(no_delay))
            used = one._conn.transport.remote_cipher
            cpu, wall, answers = timed(cell_command(one), args.commands)
            one.close()
            shaped[name] = (cpu, wall)
            print(f"cell-shaped command, {name}, {used}: {cpu * 1000:.2f} ms CPU, {wall * 1000:.1f} ms wall")
            if answers != {(0, CELL_OUT)}:
                print(f"{name}: not every command exited 0 with {CELL_OUT} bytes ({answers}); no ratio")
                return 1
        connects = {}
        farm_transport = ssh_tuning.TunedTransport
        for name, factory in (("paramiko's Transport", paramiko.Transport), ("the farm's", farm_transport)):
            ssh.TunedTransport = factory  # where SSHTransport looks it up
            try:
                cpu, wall, answers = timed(lambda: connect_and_true(node, tmp), max(args.commands // 10, 5))
            finally:
                ssh.TunedTransport = farm_transport
            connects[name] = (cpu, wall)
            print(f"connect + first command, {name}: {cpu * 1000:.2f} ms CPU, {wall * 1000:.1f} ms wall")
            if answers != {0}:
                print(f"{name}: a first command did not exit 0 ({answers}); no ratio")
                return 1
    finally:
        fleet.stop()
    (fabric, _), (farm, _) = measured.values()
    print(f"CPU per command, farm / Fabric: {farm / fabric:.2f} ({args.commands} commands each, one connection)")
    (base_cpu, base_wall), _, (farm_cpu, farm_wall) = shaped.values()
    print(
        f"cell-shaped command, the farm's / paramiko's defaults: CPU {farm_cpu / base_cpu:.2f}, "
        f"wall {farm_wall / base_wall:.3f}"
    )
    (base_cpu, base_wall), (farm_cpu, farm_wall) = connects.values()
    print(
        f"connect + first command, the farm's / paramiko's: CPU {farm_cpu / base_cpu:.2f}, "
        f"wall {farm_wall / base_wall:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
