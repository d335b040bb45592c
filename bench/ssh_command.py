"""The farm's CPU per remote command: Fabric's runner against the farm's raw channel.

One real sshd on loopback (tests/nodes.py, strict host keys), one open
connection; N times `true` through each, side by side in one run. Prints the
farm process's CPU and the wall per command for each, and their ratio; no ratio
when a command did not exit 0.

    PYTHONPATH=. python3 bench/ssh_command.py [--commands 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from nodes import CARDS, Fleet  # noqa: E402

from orchestrator.config.schema import NodeSpec  # noqa: E402
from orchestrator.transport import transport_for  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commands", type=int, default=200)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="farm-ssh-bench-"))
    fleet = Fleet(tmp / "nodes")
    node = fleet.add("n0", CARDS["t4"], start=False)
    (node.root / "home").mkdir()  # an empty HOME: no rc file run by every command (see bench/README.md)
    node.config.write_text(node.config.read_text().replace("SetEnv PATH=", f"SetEnv HOME={node.root / 'home'} PATH="))
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
            command()  # warm
            cpu, wall = time.process_time(), time.monotonic()
            codes = {command() for _ in range(args.commands)}
            measured[name] = ((time.process_time() - cpu) / args.commands, (time.monotonic() - wall) / args.commands)
            print(f"{name}: {measured[name][0] * 1000:.2f} ms CPU, {measured[name][1] * 1000:.1f} ms wall per command")
            if codes != {0}:
                print(f"{name}: NOT ALL EXIT 0 ({codes}); no ratio")
                return 1
        transport.close()
    finally:
        fleet.stop()
    (fabric, _), (farm, _) = measured.values()
    print(f"CPU per command, farm / Fabric: {farm / fabric:.2f} ({args.commands} commands each, one connection)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
