"""Red-team round 187: a kernel of a `local` node (the farm's own machine, the farm's user) reaching
for the farm's own files and processes to forge or destroy verdicts.

Stopped (guard): under the python3 runner's Landlock (here Linux 6.18, ABI 7) a kernel could not
write results.db, its run's journal (results.db.journal/TOKEN.jsonl, which the next start now
completes a dead run from), farm.yaml or jobs/; nor signal the farm's processes or read their
/proc/PID/environ.

Broke (before/after): the fork server the workers start from (Python 3.11: no authentication)
listens on a named socket, /tmp/pymp-*/listener-*, that /proc/net/unix names to anyone; Landlock
does not confine connect() to a named socket. A confined process connected, sent its own pipes and
a pickle, and ran a command unconfined, as the farm, with its environment. The name is now removed
once the workers have started, before any node's command.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, query
from test_redteam121 import NO_HOME_UID
from toyfarm import toy_farm

from orchestrator.run import fork_server

SETPRIV = ["setpriv", f"--reuid={NO_HOME_UID}", f"--regid={NO_HOME_UID}", "--clear-groups"]

# run by the kernel: what of the farm it may write, signal or read
PROBE = """\
import glob, os, sys
root = sys.argv[1]
def write(path):
    try:
        with open(path, "a") as handle:
            handle.write("{}\\n")
        return "WROTE"
    except OSError as err:
        return err.strerror
for path in ["results.db", "farm.yaml", "jobs/toy.yaml", *glob.glob(root + "/results.db.journal/*")]:
    print("write", os.path.basename(path), write(os.path.join(root, path)))
pid = os.getppid()
while pid > 1:
    with open(f"/proc/{pid}/status") as handle:
        fields = dict(line.split(":", 1) for line in handle if ":" in line)
    if fields["Uid"].split()[0] == str(os.getuid()) and fields["Name"].strip().startswith("python"):
        try:
            os.kill(pid, 0)
            print("signal", pid, "SENT")
        except OSError as err:
            print("signal", pid, err.strerror)
        try:
            open(f"/proc/{pid}/environ", "rb").read()
            print("environ", pid, "READ")
        except OSError as err:
            print("environ", pid, err.strerror)
    pid = int(fields["PPid"])
print("toy: PASS")
"""


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A toy farm's folder the farm's own user (uid NO_HOME_UID) may write."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.fail("this test runs the farm as a user of its own: it needs root and setpriv")
    root = Path(tempfile.mkdtemp(prefix="rt187-"))
    root.chmod(0o777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_guard_a_confined_local_kernel_writes_no_farm_file_and_reaches_no_farm_process(open_folder: Path) -> None:
    """Guard (stopped already): the kernel's writes to the database, its run's journal, farm.yaml and
    jobs/ are refused; the farm's processes are beyond its signals and /proc."""
    root = open_folder
    (root / "probe.py").write_text(PROBE)
    source = textwrap.dedent(f"""\
        #include <cstdlib>
        int main() {{ return std::system("python3 {root}/probe.py {root}"); }}
    """)
    config = toy_farm(root, source=source)
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    for path in (root, *root.rglob("*")):
        path.chmod(0o777 if path.is_dir() or path == smi else 0o666)
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}", "LANG": "C.UTF-8"}
    done = farm("verify", "--all", "--no-report", "--config", str(config), cwd=root, env=env, wrapper=SETPRIV)
    rows = query(root / "results.db", "SELECT outcome, stdout FROM results")
    said = bytes(rows[0]["stdout"]).decode()
    assert "WROTE" not in said and "SENT" not in said and "READ" not in said, said
    for name in ("results.db", "farm.yaml", "toy.yaml"):
        assert f"write {name} Permission denied" in said, said
    assert ".jsonl Permission denied" in said, said  # the run's journal, open while it ran
    assert "signal" in said and "environ" in said, said  # the farm's processes were found and tried
    assert done.returncode == 0, done.stdout + done.stderr


# a process confined as the runner confines a kernel (writes only beneath WORK; ABI 6: its signals and
# abstract sockets its own) that asks the fork server to run a command
ATTACKER = """\
import ctypes, os, pickle, socket, sys
from multiprocessing import reduction
c = ctypes.CDLL(None, use_errno=True)
c.syscall.restype = ctypes.c_long
attr = (ctypes.c_uint64 * 3)((1 << 1) | (1 << 4) | (1 << 5) | (0x7F << 6) | (1 << 13) | (1 << 14), 0, 3)
ruleset = c.syscall(444, ctypes.byref(attr), ctypes.c_size_t(24), ctypes.c_uint32(0))
assert ruleset >= 0 and c.prctl(38, 1, 0, 0, 0) == 0 and c.syscall(446, ctypes.c_int(ruleset), 0) == 0
mark = sys.argv[1]
try:
    open(mark + ".direct", "w")
except OSError as err:
    print("direct:", err.strerror)
names = [line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:]]
names = [n for n in names if n == sys.argv[2]]  # this test's server (/proc/net/unix names every one)
class Command:
    def __reduce__(self):
        return (os.system, ("echo escaped > " + mark,))
for name in [n for n in names if "/pymp-" in n]:
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(name)
            r, w = os.pipe()
            a, b = os.pipe()
            reduction.sendfds(client, [r, w, a, b])
            os.write(w, pickle.dumps(Command()))
            os.close(w)
        print("connected:", name)
    except OSError as err:
        print("refused:", name, err.strerror)
"""


def _attack(mark: Path, address: str) -> str:
    """Run ATTACKER against the fork server of ADDRESS; what it printed."""
    argv = [sys.executable, "-c", ATTACKER, str(mark), address]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    time.sleep(1.0)  # the fork server's child, where it got one
    return run.stdout


def test_a_confined_kernel_cannot_have_the_fork_server_run_its_command(tmp_path: Path) -> None:
    """Before: a process Landlock kept from writing anything connected to the fork server's named
    socket and had it run `echo escaped > MARK`, unconfined. Figure: "connected: /tmp/pymp-.../listener-..."
    and MARK written. After: the socket's name is removed once the workers have started (Workers calls
    fork_server.unname then), so the connect is refused; a later run's workers still start."""
    context = multiprocessing.get_context("forkserver")
    worker = context.Process(target=time.sleep, args=(0,))
    worker.start()
    worker.join()
    address = multiprocessing.forkserver._forkserver._forkserver_address
    assert any(address in line for line in Path("/proc/net/unix").read_text().splitlines())  # named to all
    fork_server.unname()
    mark = tmp_path / "escaped"
    said = _attack(mark, address)
    assert "direct: Permission denied" in said, said  # confined indeed
    assert "connected" not in said and not mark.exists(), said
    fork_server.retire()  # the next run in this process: a fresh server, named anew
    again = context.Process(target=time.sleep, args=(0,))
    again.start()
    again.join()
    assert again.exitcode == 0
    fork_server.retire()


def test_workers_unname_the_fork_server_before_any_node_command() -> None:
    """The seam the test above relies on: Workers removes the name as soon as its workers started
    from the fork server (workers.py), and retires the server when they ended."""
    source = Path("orchestrator/run/workers.py").read_text()
    assert "fork_server.unname()" in source and "fork_server.retire()" in source
