"""Round 68: code the kernel's binary loads at run time, which the inspect never saw.

The inspect counts `instructions:` (`HMMA: 1`) in the code the binary embeds for the card. A binary
that imports the driver's module loaders (`cuModuleLoadData`) or NVRTC (`nvrtcCompileProgram`) can
run a cubin the run made or read, and a CUDA variable (`CUDA_FORCE_PTX_JIT=1`) has the card run the
binary's PTX, not the cubin counted: such a cell passed, its requirement met by code that need not
have run. Now it is infra-error, saying why (classify's `pass` needs the counted code to be what
runs); an ordinary binary passes as before. Real nvcc 13.0 and cuobjdump, real sshd nodes with
stand-in cards (tests/nodes.py), through the node's python runner and through its shell scripts."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cuda_farm import cuda_farm_run
from nodes import Card, Fleet
from test_ptx_jit import TENSOR
from test_redteam52 import REAL_NVCC
from test_redteam58 import cuobjdump
from test_verdicts import rows

from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run import noderunner
from orchestrator.run.runtime_code import RUNTIME_LOADERS, runtime_loads
from orchestrator.run.stages.inspect import imports_sh

# host code that links the driver's module loader and NVRTC (weak: the stand-in node has neither
# library, and the binary still runs): what a kernel loading its GPU code at run time imports
LOADS = r"""
#ifdef FARM_LOADS
extern "C" int cuModuleLoadData(void **, const void *) __attribute__((weak));
extern "C" int nvrtcCompileProgram(void *, int, const char *const *) __attribute__((weak));
__attribute__((used)) int farm_loads(void) {
    return (cuModuleLoadData ? cuModuleLoadData(0, 0) : 0) + (nvrtcCompileProgram ? nvrtcCompileProgram(0, 0, 0) : 0);
}
#endif
"""
A100 = "NVIDIA A100-SXM4-80GB"
SM80: dict[str, object] = {"cc": {"min": "8.0"}, "instructions": {"HMMA": 1}}


def _said(python: bool, binary: Path, env: dict[str, str]) -> str:
    """What the node says of BINARY's imports: the python runner's say_imports, or the shell's."""
    if python:

        class Out:
            text = ""

            def say(self, line: str) -> None:
                self.text += line + "\n"

        out = Out()
        noderunner.say_imports(out, str(binary), list(RUNTIME_LOADERS), env)
        return out.text
    script = imports_sh(shlex.quote(str(binary)))
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An ordinary nvcc build of an HMMA kernel, and one whose host code imports the loaders."""
    folder = tmp_path_factory.mktemp("rt68bin")
    (folder / "k.cu").write_text(TENSOR + LOADS + "int main() { return 0; }\n")
    out = {}
    for name, flags in (("ordinary", []), ("loads", ["-DFARM_LOADS"])):
        out[name] = folder / name
        subprocess.run(
            [REAL_NVCC, "-O1", "-arch=sm_80", *flags, "-o", str(out[name]), str(folder / "k.cu")], check=True
        )
    return out


@pytest.mark.parametrize("python", [True, False], ids=["runner", "shell"])
def test_the_node_says_what_a_binary_imports_alike_on_both_paths(built: dict[str, Path], python: bool) -> None:
    """node/imports.py and readelf in shell: cuModuleLoadData and nvrtcCompileProgram named, an
    ordinary nvcc binary (libstdc++, libc, cudart static) nothing, and the login's JIT variable."""
    env = {"PATH": os.environ["PATH"]}
    loads = runtime_loads(_said(python, built["loads"], env))
    assert "the binary imports cuModuleLoadData, nvrtcCompileProgram" in loads, loads
    assert runtime_loads(_said(python, built["ordinary"], env)) == ""
    forced = runtime_loads(_said(python, built["ordinary"], {**env, "CUDA_FORCE_PTX_JIT": "1"}))
    assert "CUDA_FORCE_PTX_JIT=1" in forced, forced
    assert runtime_loads(_said(python, built["ordinary"], {**env, "CUDA_FORCE_PTX_JIT": "0"})) == ""


@pytest.mark.parametrize("python", [True, False], ids=["runner", "shell"])
def test_a_file_that_is_no_elf_is_no_evidence_either_way(tmp_path: Path, python: bool) -> None:
    """A script, or a cut ELF: its imports unread, which backs no requirement."""
    script = tmp_path / "k"
    script.write_text("#!/bin/sh\necho PASS\n")
    said = runtime_loads(_said(python, script, {"PATH": os.environ["PATH"]}))
    assert "could not be read" in said, said


def test_a_pass_on_code_loaded_at_run_time_is_no_pass() -> None:
    """classify: the pass line printed, the requirement met in the embedded code, but the binary
    imports a module loader: infra-error, saying why; without it, pass."""
    exp = Expectation(Outcome.PASS, "contract admits", cc=ComputeCapability.parse("8.0"))
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=0, pass_line=1, kernel_started=True)
    assert classify(ev, exp).outcome is Outcome.PASS
    ev.runtime_code = "the binary imports cuModuleLoadData: code it loads or compiles at run time"
    verdict = classify(ev, exp)
    assert verdict.outcome is Outcome.INFRA_ERROR, verdict
    assert "imports cuModuleLoadData" in verdict.reason and "the farm cannot back" in verdict.reason, verdict.reason


@pytest.fixture(scope="module", params=["resident", "shell"])
def loads_run(
    request: pytest.FixtureRequest, ssh_fleet: Fleet, make_farm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    """One farm run on an A100 (8.0: the sm_80 cubin is what it loads, HMMA in it) of the ordinary
    build, the build importing the loaders, and the ordinary one run with CUDA_FORCE_PTX_JIT=1."""
    tmp_path = tmp_path_factory.mktemp("rt68")
    node = ssh_fleet.add(f"rt68-{tmp_path.name[-12:]}", [Card(A100, "8.0", driver="580.95.05")])
    build = "{nvcc} -O1 -arch=sm_80 -o {binary} {sources}"
    variants = {
        "ordinary": {"build": build, **SM80},
        "loads": {"build": build.replace("-O1", "-O1 -DFARM_LOADS"), **SM80},
        "forced": {"build": build, **SM80, "run": "CUDA_FORCE_PTX_JIT=1 {binary}"},
    }
    summary, _ = cuda_farm_run(
        node, tmp_path, make_farm, "rt68", "rt68", variants, TENSOR + LOADS, str(cuobjdump()), runner=request.param
    )
    yield rows(tmp_path / "results.db", summary.run_id)


def test_an_ordinary_binary_still_passes(loads_run) -> None:
    r = loads_run[("ordinary", A100)]
    assert (r["outcome"], r["code_path"]) == ("pass", "native"), r["reason"]


def test_a_binary_importing_the_module_loaders_is_not_green(loads_run) -> None:
    """Its HMMA met in the sm_80 cubin, its pass line printed: the card may have run a cubin of
    NVRTC's or the driver's loaders instead. Never pass; the reviewer reads why."""
    r = loads_run[("loads", A100)]
    assert r["outcome"] == "infra-error", (r["outcome"], r["reason"])
    assert "imports cuModuleLoadData, nvrtcCompileProgram" in r["reason"], r["reason"]
    assert "need not be what the card ran" in r["reason"], r["reason"]


def test_a_run_forcing_the_ptx_jit_is_not_green(loads_run) -> None:
    """`CUDA_FORCE_PTX_JIT=1 {binary}`: the card compiles the binary's PTX, not the cubin counted."""
    r = loads_run[("forced", A100)]
    assert r["outcome"] == "infra-error", (r["outcome"], r["reason"])
    assert "CUDA_FORCE_PTX_JIT" in r["reason"], r["reason"]
