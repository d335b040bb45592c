"""Round 74: code injected into the kernel's process, and the shell path's kernel function redefined.

A library the dynamic loader is told to load first (LD_PRELOAD, LD_AUDIT in the node login's
environment, a node `env:`, a file the run sourced under the shell scripts, /etc/ld.so.preload)
runs in the kernel's process before its main: it can print the pass marker and exit 0, or hook the
launches and run a cubin of its own. A failing kernel passed so. Now each kernel command notes, as
it starts, the loader's variables it starts with and a non-empty /etc/ld.so.preload, and such a pass
is infra-error naming the variable or the file. And under the shell scripts, a file the run sources
runs in the very shell that defines the farm's kernel function and holds the kernel's status and
output files: it read the function's name from the shell's command line (/proc/$$/cmdline) and
redefined it, forging a 0 and the marker for a failing kernel. A shell-path run that sources or
evals text is now no pass. Real nvcc, real sshd nodes with stand-in cards (tests/nodes.py), through
the node's python runner and through its shell scripts."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cuda_farm import cuda_farm_run
from nodes import Card, Fleet
from test_ptx_jit import TENSOR
from test_redteam58 import cuobjdump
from test_redteam68 import A100, LOADS, SM80
from test_verdicts import rows

from orchestrator.run import commands as shell_commands
from orchestrator.run.node import kernel_commands
from orchestrator.run.node.kernel_commands import KernelCommands

BUILD = "{nvcc} -O1 -arch=sm_80 -o {binary} {sources}"
FAILING = "{nvcc} -O1 -arch=sm_80 -DMODE_FAILNUM -o {binary} {sources}"  # its numbers wrong, exit 1
# a preload that prints the marker and exits 0 before the kernel's main, in the kernel's copies
# alone (`rt74-VARIANT`): the login's shells, nvcc and the runner load it too
PRELOAD_C = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void farm_rt74(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    if (strncmp(base, "rt74-", 5) == 0) { fputs("standin: PASS\n", stdout); fflush(stdout); _exit(0); }
}
"""
# the function's name read from the shell's own command line, and redefined by a file sourced
SOURCED = "printf 'export %s_PRELOAD=PATH\\n' LD > e.sh; . ./e.sh; {binary}"  # no `LD_` in its text
FORGE = (  # braces are the template's fields: octal escapes; the marker's words apart from its text
    "tr '\\000' '\\n' </proc/$$/cmdline | grep -o 'f[a]rm.kernel.[0-9a-f]*' | head -n 1 > n; "
    'printf \'%s() \\173 shift; echo started >&%s; command "$@" >/dev/null 2>&1; echo 0 >&%s; '
    'echo "standin: P%sSS" >&%s; \\175\\n\' "$(cat n)" 6 6 A 7 > f.sh; . ./f.sh; {binary}'
)

# a program the run starts after the kernel, which inherits the shell's fds: it opens the kernel's
# status and stdout files anew through /proc (truncating them) and writes a 0 and the marker there
REWRITE = (
    "{binary}; printf 'exec 3>/proc/self/fd/%s 4>/proc/self/fd/%s; echo started >&3; echo 0 >&3; "
    'echo "standin: P%sSS" >&4\\n\' 6 7 A > p.sh; sh ./p.sh'
)


@pytest.fixture(scope="module")
def preload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rt74so")
    (folder / "p.c").write_text(PRELOAD_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "p.so"), str(folder / "p.c")], check=True)
    return folder / "p.so"


def _farm(request, ssh_fleet: Fleet, make_farm, tmp_path: Path, variants: dict, login: str = "") -> dict:
    node = ssh_fleet.add(f"rt74-{tmp_path.name[-12:]}", [Card(A100, "8.0", driver="580.95.05")], start=False)
    if login:
        node.config.write_text(node.config.read_text().replace("SetEnv HOME=", f"SetEnv {login} HOME="))
    node.start()
    summary, _ = cuda_farm_run(
        node, tmp_path, make_farm, "rt74", "rt74", variants, TENSOR + LOADS, str(cuobjdump()), runner=request.param
    )
    return rows(tmp_path / "results.db", summary.run_id)


@pytest.fixture(scope="module", params=["resident", "shell"])
def login_preload(request, ssh_fleet: Fleet, make_farm, tmp_path_factory, preload: Path) -> Iterator[tuple[str, dict]]:
    """A node whose login sets LD_PRELOAD: a failing kernel, with and without `instructions:`."""
    tmp_path = tmp_path_factory.mktemp("rt74login")
    variants = {"failing": {"build": FAILING, **SM80}, "plain": {"build": FAILING, "cc": {"min": "8.0"}}}
    yield request.param, _farm(request, ssh_fleet, make_farm, tmp_path, variants, f"LD_PRELOAD={preload}")


@pytest.fixture(scope="module", params=["resident", "shell"])
def run_preload(request, ssh_fleet: Fleet, make_farm, tmp_path_factory, preload: Path) -> Iterator[tuple[str, dict]]:
    """A clean node; runs that source a file setting LD_PRELOAD, or redefining the kernel function."""
    tmp_path = tmp_path_factory.mktemp("rt74run")
    variants = {
        "ordinary": {"build": BUILD, **SM80},
        "sourced": {"build": FAILING, **SM80, "run": SOURCED.replace("PATH", str(preload))},
        "forged": {"build": FAILING, "cc": {"min": "8.0"}, "run": FORGE},
        "rewritten": {"build": FAILING, "cc": {"min": "8.0"}, "run": REWRITE},
    }
    yield request.param, _farm(request, ssh_fleet, make_farm, tmp_path, variants)


@pytest.mark.parametrize("variant", ["failing", "plain"])
def test_a_login_preload_is_not_green(login_preload, variant: str) -> None:
    """The login's LD_PRELOAD printed the marker for a kernel that fails its numbers: it reaches the
    kernel on both paths (the node's own variable), so the farm cannot back the pass line."""
    _, got = login_preload
    r = got[(variant, A100)]
    assert r["outcome"] == "infra-error", (r["outcome"], r["reason"])
    assert "LD_PRELOAD" in r["reason"], r["reason"]


def test_an_ordinary_run_still_passes(run_preload) -> None:
    _, got = run_preload
    r = got[("ordinary", A100)]
    assert (r["outcome"], r["code_path"]) == ("pass", "native"), r["reason"]


def test_a_sourced_preload_is_not_green(run_preload) -> None:
    """The python runner hands the kernel the node's LD_ variables alone: it fails, as it is. The
    shell scripts hand it what the sourced file exported: infra-error, naming LD_PRELOAD."""
    path, got = run_preload
    r = got[("sourced", A100)]
    if path == "resident":
        assert r["outcome"] == "fail", (r["outcome"], r["reason"])
        return
    assert r["outcome"] == "infra-error", (r["outcome"], r["reason"])
    assert "LD_PRELOAD" in r["reason"], r["reason"]


def test_a_redefined_kernel_function_forges_no_pass(run_preload) -> None:
    """A sourced file redefined the farm's function (its name read off /proc/$$/cmdline) to run the
    kernel mute and note a 0 and the marker: never pass. The python runner keeps the kernel's files
    itself; the shell scripts say why the run's shell cannot be trusted."""
    path, got = run_preload
    r = got[("forged", A100)]
    assert r["outcome"] != "pass", r["reason"]
    if path == "shell":
        assert r["outcome"] == "infra-error" and "sourced" in r["reason"], (r["outcome"], r["reason"])


def test_the_runner_notes_the_loaders_variables_a_kernel_command_starts_with(tmp_path: Path, monkeypatch) -> None:
    """KernelCommands.jit_notes: LD_PRELOAD and LD_AUDIT set, an LD_LIBRARY_PATH entry in the work
    folder or one the run writes, and a non-empty ld.so.preload, as the runner starts the kernel."""
    monkeypatch.setattr(kernel_commands, "PRELOAD_FILE", str(tmp_path / "none"))
    commands = KernelCommands(copy="/c/bin/k", env={"CUDA_CACHE_DISABLE": "1"})
    base = {b"CUDA_CACHE_DISABLE": b"1"}
    assert commands.jit_notes(["/c/bin/k"], {**base, b"LD_LIBRARY_PATH": b"/usr/local/cuda/lib64"}) == [
        b"libpath-env=LD_LIBRARY_PATH"
    ]
    env = {**base, b"LD_PRELOAD": b"/x.so", b"LD_AUDIT": b"/a.so", b"LD_LIBRARY_PATH": b"/opt/l::/usr/lib"}
    assert commands.jit_notes(["/c/bin/k"], env) == [
        b"preload-env=LD_PRELOAD",
        b"preload-env=LD_AUDIT",
        b"preload-env=LD_LIBRARY_PATH",
    ]
    assert commands.jit_notes(["/c/bin/k"], {**base, b"CUDA_INJECTION64_PATH": b"/i.so"}) == [
        b"preload-env=CUDA_INJECTION64_PATH"
    ]
    (tmp_path / "ld.so.preload").write_text("  \n\t\n")
    monkeypatch.setattr(kernel_commands, "PRELOAD_FILE", str(tmp_path / "ld.so.preload"))
    assert commands.jit_notes(["/c/bin/k"], base) == []
    (tmp_path / "ld.so.preload").write_text("/lib/x.so\n")
    assert commands.jit_notes(["/c/bin/k"], base) == [b"preload-file=" + str(tmp_path / "ld.so.preload").encode()]


def test_the_shell_notes_the_loaders_variables_alike(tmp_path: Path) -> None:
    """The shell's check (run/commands.py _jit_check), as the shell scripts run it: the same notes."""
    preload = tmp_path / "ld.so.preload"

    def notes(env: dict[str, str]) -> list[str]:
        script = f"exec 6>&1; {shell_commands._jit_check('/c', str(preload))}"
        done = subprocess.run(["sh", "-c", script], env={"PATH": os.environ["PATH"], **env}, capture_output=True)
        return done.stdout.decode().split()

    assert notes({"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}) == ["libpath-env=LD_LIBRARY_PATH"]
    assert notes({"LD_PRELOAD": "/x.so", "LD_AUDIT": "/a.so", "LD_LIBRARY_PATH": "/c/run/lib"}) == [
        "preload-env=LD_PRELOAD",
        "preload-env=LD_AUDIT",
        "preload-env=LD_LIBRARY_PATH",
    ]
    assert notes({"CUDA_INJECTION64_PATH": "/i.so", "LD_PRELOAD": " : "}) == ["preload-env=CUDA_INJECTION64_PATH"]
    preload.write_text("/lib/x.so\n")
    assert notes({}) == [f"preload-file={preload}"]
    preload.write_text("  \n\t\n")
    assert notes({}) == []


def test_a_program_after_the_kernel_rewrites_no_status_under_the_runner(run_preload) -> None:
    """A program after a failing kernel reopened its status and stdout files through /proc/self/fd
    (truncating them) and wrote a 0 and the marker. The python runner keeps both itself: the
    kernel's failure stands. Left open under the shell scripts, where it passes: their kernel files
    are held by the run's shell and lie at known paths, which every program of the run can write
    (said on each such cell, base._note_confinement); taking the green of every shell-path run that
    starts another program away broke their ordinary runs (`set -e; {binary}`): round 74's report."""
    path, got = run_preload
    r = got[("rewritten", A100)]
    if path == "resident":
        assert r["outcome"] == "fail", (r["outcome"], r["reason"])
