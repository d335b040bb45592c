"""Red-team round 244: a kernel that breaks its node's toolkit for every later build.

Broke (before/after): Landlock (run/node/confine.py) handles no chmod. Where the node's login user
owns the CUDA toolkit (one in its home folder, a conda nvcc), a kernel can `chmod 000` a header every
build reads (cuda_runtime.h, which nvcc pre-includes) or take the execute bits of a program nvcc runs
(ptxas). Headers are in no identity check, and a ptxas without its execute bits is left out of the next
run's probe: every later build of the node failed "Permission denied", stored as each innocent job's
`build-fail`, exit 1. Now the look after a failed build asks the node of each file its log says was
denied, outside the cell's own folders: one of the login's own that it can no longer read (or run) is
the node's trouble, infra-error naming the file and its mode. A job's own file in its own build folder,
or a file the login does not own (root's, unreadable by design), stays the job's build-fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, query
from test_redteam121 import NO_HOME_UID

CUDA = Path("/usr/local/cuda-13.0")

# a "kernel" that passes, and takes every bit of a file of its node's toolkit on its way (TARGET, MODE)
BREAKER = r"""
#include <cstdio>
#include <sys/stat.h>
int main() {
    chmod("TARGET", MODE);  // Landlock handles no chmod
    std::printf("toy: PASS\n");
    return 0;
}
"""

VICTIM = """\
#include <cstdio>
int main() { std::printf("toy: PASS\\n"); return 0; }
"""


def _toolkit(home: Path) -> Path:
    """A CUDA toolkit the node's login owns (HOME/cuda): the real nvcc and ptxas copied, the rest of
    its programs and headers linked to the machine's, cuda_runtime.h (which nvcc pre-includes in
    every build) a copy of its own. Returns its nvcc."""
    top = home / "cuda"
    (top / "bin").mkdir(parents=True)
    for name in ("nvcc", "nvcc.profile", "ptxas"):
        shutil.copy2(CUDA / "bin" / name, top / "bin" / name)
    for name in ("crt", "cudafe++", "fatbinary", "nvlink", "bin2c"):
        (top / "bin" / name).symlink_to(CUDA / "bin" / name)
    for name in ("nvvm", "lib"):
        (top / name).symlink_to(CUDA / name)
    (top / "include").mkdir()
    for entry in (CUDA / "include").iterdir():
        if entry.name != "cuda_runtime.h":
            (top / "include" / entry.name).symlink_to(entry)
    shutil.copy2(CUDA / "include" / "cuda_runtime.h", top / "include" / "cuda_runtime.h")
    (top / "targets" / "x86_64-linux").mkdir(parents=True)
    (top / "targets" / "x86_64-linux" / "include").symlink_to("../../include")
    (top / "targets" / "x86_64-linux" / "lib").symlink_to("../../lib")
    return top / "bin" / "nvcc"


@pytest.fixture
def node_home() -> Iterator[Path]:
    """A folder of the farm's own user (uid NO_HOME_UID: pytest's tmp_path is root's alone), holding
    the toolkit that user owns."""
    if shutil.which("setpriv") is None or os.geteuid() != 0 or not (CUDA / "bin" / "nvcc").exists():
        pytest.fail("this test runs the farm as a user of its own: it needs root, setpriv and CUDA 13.0")
    root = Path(tempfile.mkdtemp(prefix="rt244-"))
    root.chmod(0o755)
    _toolkit(root)
    subprocess.run(["chown", "-R", "-h", f"{NO_HOME_UID}:{NO_HOME_UID}", str(root)], check=True)
    yield root
    subprocess.run(["chmod", "-R", "u+rwX", str(root)], check=False)
    shutil.rmtree(root, ignore_errors=True)


def _farm(root: Path, kernels: dict[str, tuple[str, str]], *select: str) -> subprocess.CompletedProcess[str]:
    """A farm of KERNELS (name -> (source, build command)) on its local node (a T4 stand-in, nvcc
    the toolkit the node's user owns), run as that user: `farm verify SELECT` (--all without)."""
    (root / "kernels").mkdir(exist_ok=True)
    (root / "jobs").mkdir(exist_ok=True)
    for name, (source, build) in kernels.items():
        (root / "kernels" / f"{name}.cu").write_text(source)
        (root / "jobs" / f"{name}.yaml").write_text(
            f"kernel: {name}\nsources: [kernels/{name}.cu]\npass_marker: 'toy: PASS'\nrefusal_marker: 'needs CC'\n"
            f"variants:\n  plain:\n    build: '{build}'\n    inspect: 'objdump -d {{binary}}'\n"
            "    instructions: {ret: 1}\n    cc: {min: '7.5'}\n"
        )
    config = root / "farm.yaml"
    config.write_text(
        "database: sqlite:///results.db\nreports: reports\nnodes:\n  here:\n    transport: local\n"
        f"    nvcc: {root / 'cuda' / 'bin' / 'nvcc'}\n    workdir: {root / 'node'}\n"
    )
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    subprocess.run(["chown", "-R", f"{NO_HOME_UID}:{NO_HOME_UID}", str(root / "kernels"), str(root / "jobs")])
    subprocess.run(["chown", f"{NO_HOME_UID}:{NO_HOME_UID}", str(config), str(smi.parent), str(smi)], check=True)
    # no /usr/local/bin: nvcc's programs are its toolkit's alone (that folder has wrappers of the machine's)
    env = {"PATH": f"{smi.parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    setpriv = ["setpriv", f"--reuid={NO_HOME_UID}", f"--regid={NO_HOME_UID}", "--clear-groups"]
    args = (*(select or ("--all",)), "--no-report", "--config", str(config))
    return farm("verify", *args, cwd=root, env=env, wrapper=setpriv, timeout=300)


def _rows(root: Path, kernel: str) -> list[dict]:
    sql = "SELECT outcome, reason, failed_stage FROM results WHERE kernel = ? ORDER BY id"
    return [dict(r) for r in query(root / "results.db", sql, kernel)]


BUILD = "{nvcc} -arch=sm_75 -o {binary} {sources}"


def _broken_then_built(root: Path, target: Path, mode: str) -> tuple[list[dict], subprocess.CompletedProcess[str]]:
    """Run 1: the breaker's kernel passes, taking TARGET's bits (MODE). Run 2: the victim's build."""
    breaker = BREAKER.replace("TARGET", str(target)).replace("MODE", mode)
    first = _farm(root, {"breaker": (breaker, BUILD)}, "breaker:plain")
    assert _rows(root, "breaker")[0]["outcome"] == "pass", (_rows(root, "breaker"), first.stdout[-3000:])
    assert target.stat().st_mode & 0o777 == int(mode, 8), oct(target.stat().st_mode)
    second = _farm(root, {"victim": (VICTIM, BUILD)}, "victim:plain")
    return _rows(root, "victim"), second


def test_a_kernel_that_takes_the_bits_of_a_toolkit_header_is_no_later_jobs_build_fail(node_home: Path) -> None:
    """Before: the victim's build failed "<command-line>: fatal error: .../cuda_runtime.h: Permission
    denied" and was stored as its `build-fail` (a kernel bug), exit 1. Figure: infra-error naming the
    header and its mode 000, "no verdict on the kernel"."""
    header = node_home / "cuda" / "include" / "cuda_runtime.h"
    rows, done = _broken_then_built(node_home, header, "0")
    assert [r["outcome"] for r in rows] == ["infra-error"], (rows, done.stdout[-3000:], done.stderr[-2000:])
    assert str(header) in rows[0]["reason"] and "mode 000" in rows[0]["reason"], rows[0]["reason"]
    assert "no verdict on the kernel" in rows[0]["reason"], rows[0]["reason"]


def test_a_kernel_that_takes_the_execute_bits_of_ptxas_is_no_later_jobs_build_fail(node_home: Path) -> None:
    """Before: the next run's probe left the unexecutable ptxas out, and the victim's build failed
    "sh: 1: ptxas: Permission denied": its `build-fail`. Figure: infra-error naming the toolkit's ptxas
    (found by nvcc's folder: the shell's words name no folder) and its mode 644."""
    ptxas = node_home / "cuda" / "bin" / "ptxas"
    rows, done = _broken_then_built(node_home, ptxas, "0644")
    assert [r["outcome"] for r in rows] == ["infra-error"], (rows, done.stdout[-3000:], done.stderr[-2000:])
    assert str(ptxas) in rows[0]["reason"] and "mode 644" in rows[0]["reason"], rows[0]["reason"]


def test_a_jobs_own_unreadable_header_stays_its_build_fail(node_home: Path) -> None:
    """A build that makes a header in its own build folder unreadable and includes it, and one that
    includes a file the login does not own (root's /etc/shadow), each fail "Permission denied": the
    job's own build-fail, as before."""
    own = "printf x > own.h && chmod 000 own.h && {nvcc} -arch=sm_75 -include own.h -o {binary} {sources}"
    root_owned = "{nvcc} -arch=sm_75 -include /etc/shadow -o {binary} {sources}"
    done = _farm(node_home, {"own": (VICTIM, own), "rooted": (VICTIM, root_owned)})
    for kernel in ("own", "rooted"):
        rows = _rows(node_home, kernel)
        assert [r["outcome"] for r in rows] == ["build-fail"], (kernel, rows, done.stdout[-3000:])
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]


def test_the_files_asked_of_the_node_are_outside_the_cells_own_folders() -> None:
    """Before: no file a failed build's log named was asked of the node. Figure: each denied file
    outside the cell's build and run folders is asked (a relative one as the build's folder's, a
    shell's bare `ptxas` in nvcc's folder, to be run), none of the cell's own."""
    from orchestrator.run import denied_files

    log = (
        b"<command-line>: fatal error: /opt/cu/bin/../include/cuda_runtime.h: Permission denied\n"
        b"k.cu:1:10: fatal error: inc/own.h: Permission denied\n"
        b"sh: 1: ptxas: Permission denied\n"
        b"/usr/bin/ld: cannot open output file a.out: Permission denied\n"
    )
    asked = denied_files.candidates(log, "/w/build/k", ["/w/build/k", "/w/run/k"], ["/opt/cu/bin"])
    assert asked == [
        ("/opt/cu/bin/../include/cuda_runtime.h", False),
        ("/opt/cu/bin/ptxas", True),
        ("/opt/cu/bin/a.out", False),
    ]
    said = denied_files.denied(["@@farm-denied read 0 /opt/cu/include/cuda_runtime.h"])
    assert "/opt/cu/include/cuda_runtime.h" in said and "(mode 000)" in said, said


def test_a_shells_refused_write_is_not_a_program_refused_its_run() -> None:
    """Before (this round's first cut): `sh: 1: cannot create SOURCE: Permission denied` (a confined
    build's write, refused by Landlock) was read as a program refused its run, and the readable
    staged source of mode 644 was "no longer run" by the node's user: infra-error. Figure: asked as
    a file to read (which it is), and a shell's own `sh: 1: ptxas:` as one to run."""
    from orchestrator.run import denied_files

    log = b"sh: 1: cannot create /w/bundles/d/k.cpp: Permission denied\nsh: 1: ptxas: Permission denied\n"
    asked = denied_files.candidates(log, "/w/build/k", ["/w/build/k"], ["/opt/cu/bin"])
    assert asked == [("/w/bundles/d/k.cpp", False), ("/opt/cu/bin/ptxas", True)], asked
