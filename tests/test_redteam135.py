"""Red-team round 135: a kernel on a `local` node (the farm's own machine, the farm's own Unix
user) attacking the farm's own process: its /proc/PID/environ, mem, fd/* and ptrace, its signals,
and the results database by path. The farm runs as a user of its own here (`setpriv --reuid`):
root's CAP_SYS_PTRACE passes every dumpable check, so a test run as root shows no protection.

Broke (before/after):
- A kernel the node cannot confine (`runner: shell`; a node without Landlock runs as it does) found
  the farm's pid up its parent chain and read /proc/PID/environ (the operator's PGPASSWORD,
  FARM_DATABASE with its password, a CI's tokens: the local node hands its commands none of them,
  round 99, but the farm process holds them), opened /proc/PID/mem read-write (the farm's verdicts
  in memory), named and opened the farm's descriptors (results.db, its journal) through
  /proc/PID/fd and PTRACE_SEIZEd it. The farm now makes itself non-dumpable (PR_SET_DUMPABLE 0) as
  soon as it connects a `local` node (transport/farm_private.py): each of those is refused.
- The local node's commands kept variables of the farm's a CI sets that the credential names
  missed: GitLab's CI_JOB_JWT (a signed token), DOCKER_AUTH_CONFIG and npm's NPM_CONFIG__AUTH
  (registry passwords). A name with a JWT or an AUTH part is the farm's now (local_env.py).

Held (kept as guards): a confined kernel (the python3 runner, Landlock) of a non-root farm finds the
farm's pid but reads none of environ, maps, mem or fd, cannot ptrace or signal it (ABI 6) and cannot
open results.db for writing by path; its cell passes on its own merits.

Open:
- An unconfined kernel (the shell runner, a node without Landlock) of the farm's user still writes
  results.db, its journal and the reports folder by path and may SIGSTOP the farm (the run then
  waits on it): its page says it ran unconfined; only a Unix user of its own for kernels closes it.
- A farm run as root: its kernels are root, and a confined one still read the farm's environ
  (Linux 6.18's Landlock let that through for root, where it refused a non-root kernel).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, query
from test_redteam121 import NO_HOME_UID
from toyfarm import toy_farm

from orchestrator.transport.local_env import is_credential, node_environment

SECRET = "pgpw-rt135-7f3a9c"

# what the kernel runs: the farm's pid up its parent chain, then everything it tries on it
ATTACK = r"""
import ctypes, os, sys
def parent(pid):
    text = open(f"/proc/{pid}/stat").read()
    return int(text[text.rindex(")") + 2 :].split()[1])
def words(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        return ""
pid = os.getpid()
while pid > 1 and "orchestrator.cli" not in words(pid):
    pid = parent(pid)
print("FARM-PID", pid if pid > 1 else "none")
def attempt(name, how):
    try:
        print(name, "GOT", how())
    except OSError as err:
        print(name, "REFUSED", err.errno)
attempt("ENVIRON", lambda: sys.argv[1].encode() in open(f"/proc/{pid}/environ", "rb").read())
attempt("MAPS", lambda: len(open(f"/proc/{pid}/maps").read()))
attempt("MEM", lambda: open(f"/proc/{pid}/mem", "r+b").close())
attempt("FD", lambda: sorted(os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")))
attempt("DB", lambda: open(sys.argv[2], "r+b").close())
libc = ctypes.CDLL(None, use_errno=True)
seized = libc.ptrace(0x4206, pid, 0, 0)
print("PTRACE", "GOT" if seized == 0 else "REFUSED")
attempt("SIGNAL", lambda: os.kill(pid, 0))
"""

KERNEL = r"""
#include <cstdio>
#include <cstdlib>
int main() {
    std::fflush(stdout);
    std::system("python3 ATTACK SECRET DB 2>&1");
    std::printf("toy: PASS\n");
    return 0;
}
"""


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder the farm's own user may write (pytest's tmp_path is root's alone, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="rt135-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _attacked(root: Path, runner: str) -> dict[str, str]:
    """The toy farm's kernel (ATTACK) on its local node, the farm run as uid NO_HOME_UID with the
    operator's PGPASSWORD: what it reached of the farm's process, by attempt."""
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv to run the farm as a user of its own")
    (root / "attack.py").write_text(ATTACK)
    db = root / "results.db"
    kernel = KERNEL.replace("ATTACK", str(root / "attack.py")).replace("SECRET", SECRET).replace("DB", str(db))
    config = toy_farm(root, source=kernel)
    config.write_text(config.read_text() + f"    runner: {runner}\n")
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o777 if path.is_dir() or path == smi else 0o666)
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}", "LANG": "C.UTF-8", "PGPASSWORD": SECRET}
    setpriv = ["setpriv", f"--reuid={NO_HOME_UID}", f"--regid={NO_HOME_UID}", "--clear-groups"]
    done = farm("verify", "--all", "--no-report", "--config", str(config), cwd=root, env=env, wrapper=setpriv)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = query(db, "SELECT outcome, stdout FROM results")
    assert [r["outcome"] for r in rows] == ["pass"], rows
    said = bytes(rows[0]["stdout"]).decode()
    found = dict(re.findall(r"(?m)^([A-Z-]+) (.*)$", said))
    assert found["FARM-PID"] != "none", said  # the attack found the farm: its refusals below mean something
    return found


def test_an_unconfined_kernel_on_a_local_node_reaches_nothing_of_the_farms_process(open_folder: Path) -> None:
    """`runner: shell`: the kernel runs unconfined, as the farm's user. It read the farm's environ
    (the operator's PGPASSWORD), opened its memory read-write, listed its open results database
    and journal and PTRACE_SEIZEd it: the farm was dumpable. Each is refused now."""
    found = _attacked(open_folder, "shell")
    for name in ("ENVIRON", "MAPS", "MEM", "FD"):
        assert found[name].startswith("REFUSED"), (name, found)
    assert found["PTRACE"] == "REFUSED", found


def test_a_confined_kernel_on_a_local_node_reaches_nothing_of_the_farms_process(open_folder: Path) -> None:
    """The python3 runner confines the kernel (Landlock): none of environ, memory, descriptors,
    ptrace, a signal (ABI 6) or results.db by path for writing. A guard: it held before."""
    found = _attacked(open_folder, "auto")
    for name in ("ENVIRON", "MAPS", "MEM", "FD", "DB"):
        assert found[name].startswith("REFUSED"), (name, found)
    assert found["PTRACE"] == "REFUSED", found
    release = tuple(int(part) for part in re.findall(r"\d+", os.uname().release)[:2])
    if release >= (6, 12):  # Landlock's signal scope is ABI 6
        assert found["SIGNAL"].startswith("REFUSED"), found


@pytest.mark.parametrize(
    "name, value",
    [
        ("CI_JOB_JWT", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJqb2IifQ.c2ln"),
        ("CI_JOB_JWT_V2", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"),
        ("DOCKER_AUTH_CONFIG", '{"auths": {"registry.example.org": {"auth": "dXNlcjpwYXNz"}}}'),
        ("NPM_CONFIG__AUTH", "dXNlcjpwYXNz"),
    ],
)
def test_a_ci_token_the_credential_names_missed_reaches_no_local_kernel(name: str, value: str) -> None:
    """A CI's signed job token and registry passwords went to every local node's kernel."""
    assert name not in node_environment({name: value, "PATH": "/usr/bin"})


@pytest.mark.parametrize("name", ["XAUTHORITY", "AUTHOR", "CUDA_VISIBLE_DEVICES", "OAUTHLIB_INSECURE", "LANG"])
def test_a_name_merely_holding_auth_letters_is_no_credential(name: str) -> None:
    # on the denylist itself: the allowlist (review 139) keeps none of these but LANG from a local node
    assert not is_credential(name, "x")


def test_the_process_holding_the_database_is_kept_private_before_any_worker_runs_a_local_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With worker processes a local node may be run by a worker, not by the process that holds
    results.db and the journal: that one is made non-dumpable as the run starts, whoever connects."""
    import ctypes
    import ctypes.util

    from orchestrator.config.farm import load_farm
    from orchestrator.plan import plan_cells
    from orchestrator.run import scheduler
    from orchestrator.transport import farm_private

    config = toy_farm(tmp_path / "farm")
    farm_ = load_farm(config)
    assert any(node.transport == "local" for node in farm_.nodes.values())
    cells = plan_cells(farm_)

    def checked() -> int:
        # FarmRun stands in: what matters is this process's state once the run has begun
        monkeypatch.setattr(scheduler.FarmRun, "__init__", lambda self, *a, **k: None)
        monkeypatch.setattr(scheduler.FarmRun, "execute", lambda self, c, s: None)
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        # as a fresh farm starts: this test process may have run a local node in-process before
        libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE 1
        farm_private.keep_private.cache_clear()
        before = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
        scheduler.run_cells(farm_, None, cells)  # type: ignore[arg-type]
        after = libc.prctl(3, 0, 0, 0, 0)
        return 10 * before + after

    pid = os.fork()  # the test's own process stays as it was
    if pid == 0:
        code = 99
        try:
            code = checked()
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 10, "dumpable before (1), not after (0)"
