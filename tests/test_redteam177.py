"""Red-team round 177: the node's environment changes what is built or which code runs, unseen.

Two holes, each through real nvcc 13.0 and cuobjdump on real sshd nodes with stand-in cards
(tests/nodes.py), through the node's python runner and through its shell scripts:

- nvcc hands the login's `OCG_FLAGS` to ptxas, `NVVM_FLAGS` to cicc and `NVLINK_FLAGS` to nvlink
  (as it does the `PTXAS_FLAGS` of its nvcc.profile). The build key named the login's
  NVCC_APPEND_FLAGS and the compilers' variables (round 52) and nvcc's dry run of nothing, which
  shows no ptxas, cicc or nvlink: a binary built under other ptxas options was reused.
- The driver reads `CUDA_FORCE_JIT` / `CUDA_DISABLE_JIT` as it reads `CUDA_FORCE_PTX_JIT` /
  `CUDA_DISABLE_PTX_JIT` (CUDA 12.8+'s programming guide, 5.2.2.4-5): the card JIT-compiles the
  binary's PTX, not the cubin whose `instructions:` the inspect counted. The farm (rounds 68, 71)
  knew only the `_PTX_` names, and such a run passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cuda_farm import cuda_farm_run
from nodes import CARDS, Card, Fleet, query, standin_variant
from test_node_runner import both_probes
from test_ptx_jit import TENSOR
from test_redteam52 import REAL_NVCC, login_env, verify
from test_redteam58 import cuobjdump
from test_redteam68 import A100, LOADS, SM80
from test_verdicts import MIN75, rows

from orchestrator.run.commands import jit_started
from orchestrator.run.node.kernel_commands import KernelCommands
from orchestrator.run.runtime_code import runtime_loads

BUILD = "{nvcc} -O1 -arch=sm_80 -o {binary} {sources}"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path / "fleet")
    yield fleet
    fleet.stop()


@pytest.mark.parametrize(("name", "value"), [("OCG_FLAGS", "-O0"), ("NVVM_FLAGS", "-g")])
def test_an_nvcc_stage_variable_of_the_login_rebuilds(
    fleet: Fleet, tmp_path: Path, runner: str, name: str, value: str
) -> None:
    """Before: with the login's OCG_FLAGS=-O0 (ptxas) or NVVM_FLAGS=-g (cicc) set after a first
    run, the second reused the binary built without them (build_cached 1, the same key), though
    nvcc now makes another cubin. Figure: the second build is built again, under another key."""
    node = fleet.add("t4", CARDS["t4"], start=False)
    build = "{nvcc} -O1 -DMODE_PASS -DMIN_CC=75 -o {binary} {sources}"
    variants = {"p": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)}
    outcomes = []
    for env in ({}, {name: value}):
        login_env(node, **env)
        outcomes.append(verify(node, tmp_path / "farm", variants, nvcc=REAL_NVCC))
    got = query(tmp_path / "farm" / "results.db", "SELECT build_cached, build_key FROM results ORDER BY run_id")
    assert outcomes == [{"pass": 1}, {"pass": 1}], outcomes
    assert [r["build_cached"] for r in got] == [0, 0], [dict(r) for r in got]
    assert got[0]["build_key"] != got[1]["build_key"]


def test_both_probes_name_the_nvcc_stage_variables_alike(fleet: Fleet, tmp_path: Path) -> None:
    """Before: neither probe named OCG_FLAGS, NVVM_FLAGS or NVLINK_FLAGS. Figure: both list each
    (its value in hex), alike."""
    node = fleet.add("t4", CARDS["t4"], start=False)
    login_env(node, OCG_FLAGS="-O0", NVVM_FLAGS="-g", NVLINK_FLAGS="-v")
    shell, served = both_probes(node, tmp_path / "work", [])
    assert shell.compilers == served.compilers
    lines = served.compilers.splitlines()
    for name, value in (("OCG_FLAGS", b"-O0"), ("NVVM_FLAGS", b"-g"), ("NVLINK_FLAGS", b"-v")):
        assert f"env {name} {value.hex()}" in lines, served.compilers


def test_the_runner_notes_the_new_jit_names() -> None:
    """Before: KernelCommands.jit_notes and the run's reason knew only the `_PTX_` names.
    Figure: CUDA_FORCE_JIT / CUDA_DISABLE_JIT set (or a launcher's word) are noted and said."""
    commands = KernelCommands(copy="/c/bin/k", env={"CUDA_CACHE_DISABLE": "1"})
    notes = commands.jit_notes(["/c/bin/k"], {b"CUDA_FORCE_JIT": b"1", b"CUDA_CACHE_DISABLE": b"1"})
    assert notes == [b"jit-env=CUDA_FORCE_JIT"], notes
    words = ["/usr/bin/env", "CUDA_DISABLE_JIT=1", "/c/bin/k"]
    assert commands.jit_notes(words, {b"CUDA_CACHE_DISABLE": b"1"}) == [b"jit-word=CUDA_DISABLE_JIT"]
    assert "CUDA_FORCE_JIT" in jit_started([b"jit-env=CUDA_FORCE_JIT"])
    assert "CUDA_FORCE_JIT=1" in runtime_loads("@@farm cuda-env CUDA_FORCE_JIT=1\n")


@pytest.fixture(scope="module", params=["resident", "shell"])
def jit_run(
    request: pytest.FixtureRequest, ssh_fleet: Fleet, make_farm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    """One run on an A100 (its sm_80 cubin holds the HMMA counted): the ordinary binary, and one
    run as `CUDA_FORCE_JIT=1 {binary}` (the driver then compiles the binary's PTX instead)."""
    tmp_path = tmp_path_factory.mktemp("rt177")
    node = ssh_fleet.add(f"rt177-{tmp_path.name[-12:]}", [Card(A100, "8.0", driver="580.95.05")])
    variants = {
        "ordinary": {"build": BUILD, **SM80},
        "forced": {"build": BUILD, **SM80, "run": "CUDA_FORCE_JIT=1 {binary}"},
    }
    summary, _ = cuda_farm_run(
        node, tmp_path, make_farm, "rt177", "rt177", variants, TENSOR + LOADS, str(cuobjdump()), runner=request.param
    )
    yield request.param, rows(tmp_path / "results.db", summary.run_id)


def test_an_ordinary_run_still_passes(jit_run) -> None:
    r = jit_run[1][("ordinary", A100)]
    assert (r["outcome"], r["code_path"]) == ("pass", "native"), r["reason"]


def test_a_run_forcing_the_jit_is_not_green(jit_run) -> None:
    """Before: `CUDA_FORCE_JIT=1 {binary}` passed `HMMA: 1`, counted in a cubin the card was told
    to ignore. Figure: infra-error naming CUDA_FORCE_JIT."""
    r = jit_run[1][("forced", A100)]
    assert r["outcome"] == "infra-error", (r["outcome"], r["reason"])
    assert "CUDA_FORCE_JIT" in r["reason"], r["reason"]


def test_the_logins_jit_variable_is_not_green(ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str) -> None:
    """Before: the node's login (sshd SetEnv: /etc/environment, a ~/.bashrc) set CUDA_FORCE_JIT=1
    and the ordinary binary passed `HMMA: 1`. Figure: infra-error naming it."""
    node = ssh_fleet.add(f"rt177l-{tmp_path.name[-12:]}", [Card(A100, "8.0", driver="580.95.05")], start=False)
    login_env(node, CUDA_FORCE_JIT="1")
    summary, _ = cuda_farm_run(
        node, tmp_path, make_farm, "rt177", "rt177", {"o": {"build": BUILD, **SM80}}, TENSOR, str(cuobjdump())
    )
    r = rows(tmp_path / "results.db", summary.run_id)[("o", A100)]
    assert r["outcome"] == "infra-error", (r["outcome"], r["reason"])
    assert "CUDA_FORCE_JIT" in r["reason"], r["reason"]
