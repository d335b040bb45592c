"""Round 71: the driver's variables set out of the run text's sight.

Round 68 took a pass away where the run command's text, or the node's login, names
`CUDA_FORCE_PTX_JIT` / `CUDA_DISABLE_PTX_JIT` (the card then runs the binary's PTX, not the cubin
the inspect counted, or the reverse). A run can hand them to the kernel without naming them so:
as a launcher's word the shell put together (`env CUDA_FORCE""_PTX_JIT=1 {binary}`, `env
$(printf ...) {binary}`), or set in the shell by text the run builds (`eval "export ..."`, a sourced
file); and undoing the farm's CUDA_CACHE_DISABLE=1 has the driver take a JIT cache's code the farm
never saw. Each passed `instructions:` on code that need not have run. Now what each kernel command
starts with (its environment, its launchers' words as expanded) is noted where it starts, and such
a cell is infra-error saying which variable and where. Real nvcc, real sshd nodes with stand-in
cards (tests/nodes.py), through the node's python runner and through its shell scripts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cuda_farm import cuda_farm_run
from nodes import Card, Fleet
from test_ptx_jit import TENSOR
from test_redteam58 import cuobjdump
from test_redteam68 import A100, LOADS, SM80
from test_verdicts import rows

from orchestrator.run.node.kernel_commands import KernelCommands

BUILD = "{nvcc} -O1 -arch=sm_80 -o {binary} {sources}"
# each sets a driver variable for the kernel with no text of the run naming it (round 68's check); a
# launcher's word the shell fills in (`env "$V" {binary}`, `mpirun -x "$V"`) is refused at load
RUNS = {
    "sourced": "printf 'export CUDA_%s_PTX_JIT=1\\n' FORCE > e.sh; . ./e.sh; {binary}",
    "cache": "printf 'export CUDA_%s_DISABLE=0\\n' CACHE > e.sh; . ./e.sh; {binary}",
}


@pytest.fixture(scope="module", params=["resident", "shell"])
def hidden_run(
    request: pytest.FixtureRequest, ssh_fleet: Fleet, make_farm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict]]:
    tmp_path = tmp_path_factory.mktemp("rt71")
    patch = pytest.MonkeyPatch()
    patch.setenv("FARM_TEST_RUNNER", "auto" if request.param == "resident" else request.param)
    node = ssh_fleet.add(f"rt71-{tmp_path.name[-12:]}", [Card(A100, "8.0", driver="580.95.05")])
    variants = {"ordinary": {"build": BUILD, **SM80}}
    variants.update({name: {"build": BUILD, **SM80, "run": run} for name, run in RUNS.items()})
    try:
        summary, _ = cuda_farm_run(
            node, tmp_path, make_farm, "rt71", "rt71", variants, TENSOR + LOADS, str(cuobjdump())
        )
    finally:
        patch.undo()
    yield request.param, rows(tmp_path / "results.db", summary.run_id)


def test_an_ordinary_run_still_passes(hidden_run) -> None:
    _, got = hidden_run
    r = got[("ordinary", A100)]
    assert (r["outcome"], r["code_path"]) == ("pass", "native"), r["reason"]


@pytest.mark.parametrize("variant", ["sourced", "cache"])
def test_a_variable_the_shell_set_out_of_sight_is_not_green(hidden_run, variant: str) -> None:
    """Set by a file the run wrote and sourced: the shell scripts hand it to the kernel, which starts
    with it (infra-error, naming it); the python runner hands a kernel only the variables the run's
    text names and forces the farm's own, so there the kernel never had it and the cell passes."""
    path, got = hidden_run
    r = got[(variant, A100)]
    name = "CUDA_FORCE_PTX_JIT" if variant == "sourced" else "CUDA_CACHE_DISABLE"
    if path == "resident":
        assert r["outcome"] == "pass", r["reason"]
        return
    assert r["outcome"] == "infra-error", (r["outcome"], r["reason"])
    assert name in r["reason"] and "environment" in r["reason"], r["reason"]


def test_the_runner_notes_the_jit_variables_a_kernel_command_starts_with() -> None:
    """KernelCommands.jit_notes: the environment a request's kernel gets and its words up to the
    copy, as the runner execs them; the farm's CUDA_CACHE_DISABLE=1 and a 0 are no note."""
    commands = KernelCommands(copy="/c/bin/k", env={"CUDA_CACHE_DISABLE": "1"})
    assert commands.jit_notes(["/usr/bin/env", "/c/bin/k"], {b"CUDA_CACHE_DISABLE": b"1"}) == []
    assert commands.jit_notes(["/c/bin/k"], {b"CUDA_FORCE_PTX_JIT": b"0", b"CUDA_CACHE_DISABLE": b"1"}) == []
    assert commands.jit_notes(["/c/bin/k"], {b"CUDA_DISABLE_PTX_JIT": b"1", b"CUDA_CACHE_DISABLE": b"0"}) == [
        b"jit-env=CUDA_DISABLE_PTX_JIT",
        b"jit-env=CUDA_CACHE_DISABLE",
    ]
    words = ["/usr/bin/env", "CUDA_FORCE_PTX_JIT=1", "/c/bin/k", "CUDA_DISABLE_PTX_JIT"]
    assert commands.jit_notes(words, {b"CUDA_CACHE_DISABLE": b"1"}) == [b"jit-word=CUDA_FORCE_PTX_JIT"]
