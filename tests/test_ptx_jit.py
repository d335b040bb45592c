"""SASS `instructions:` on a card that compiles the binary's PTX at load (ptx-jit).

The course's CUTLASS builds (`-arch=sm_75`, `-arch=sm_80`) run on the H200 through PTX the driver
compiles at load. Their `HMMA: 1` was counted in cubins the card never loads (round 58's finding);
counted in nothing, they would be inspect-fail though the card ran HMMA. The node's runner now
compiles that PTX for the card with the node's nvcc (run/node/jit.py) and the farm counts there.
Real nvcc 13.0 and cuobjdump, real sshd nodes, stand-in cards (tests/nodes.py)."""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator

import pytest
from cuda_farm import cuda_farm_run
from nodes import Card, Fleet
from test_redteam58 import cuobjdump
from test_verdicts import rows

from orchestrator.config.capability import ComputeCapability
from orchestrator.run import machine_code, noderunner
from orchestrator.run.stages import jit_shell

# HMMA in SASS wherever mma.sync is compiled for 8.0 or later; nothing on older archs
TENSOR = r"""
__global__ void tensor(float *out, const unsigned *a, const unsigned *b) {
#if __CUDA_ARCH__ >= 800
    float c0 = 0, c1 = 0, c2 = 0, c3 = 0;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    out[threadIdx.x] = c0 + c1 + c2 + c3;
#endif
}
"""
MIN80: dict[str, object] = {"cc": {"min": "8.0"}}
H200, FUTURE = "NVIDIA H200", "NVIDIA Future 12.5"


@pytest.fixture(scope="module", params=["resident", "shell"])
def jit_run(
    request: pytest.FixtureRequest, ssh_fleet: Fleet, make_farm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    """One farm run of an `-arch=sm_80` build on an H200 (9.0) and on a card newer than the
    node's nvcc 13.0 knows (12.5): both compile its compute_80 PTX at load. Through the node's
    resident python runner (node/jit.py), and through the shell scripts of a node the runner
    does not serve (stages/jit_shell.py: no python3, or Slurm)."""
    tmp_path = tmp_path_factory.mktemp("jit")
    cards = [Card(H200, "9.0", driver="580.95.05"), Card(FUTURE, "12.5", driver="580.95.05")]
    node = ssh_fleet.add(f"jit-{tmp_path.name[-12:]}", cards)
    variants = {
        "ampere": {"build": "{nvcc} -O1 -arch=sm_80 -o {binary} {sources}", **MIN80, "instructions": {"HMMA": 1}},
        # PTX alone: no SASS in the binary's dump at all (the node's own gate reads that dump)
        "ptxonly": {
            "build": "{nvcc} -O1 -gencode arch=compute_80,code=compute_80 -o {binary} {sources}",
            **MIN80,
            "instructions": {"HMMA": 1},
        },
        # a requirement no code for a 9.0 card meets: HGMMA is wgmma's, which an sm_80 build has not
        "hgmma": {"build": "{nvcc} -O1 -arch=sm_80 -o {binary} {sources}", **MIN80, "instructions": {"HGMMA": 1}},
    }
    summary, _ = cuda_farm_run(
        node, tmp_path, make_farm, "jit", "jit", variants, TENSOR, str(cuobjdump()), runner=request.param
    )
    yield rows(tmp_path / "results.db", summary.run_id)


def test_hmma_is_counted_in_the_nodes_compile_of_the_ptx_the_card_runs(jit_run) -> None:
    """The course's CUTLASS shape on a Hopper: the card loads no cubin of the sm_80 build and
    compiles its PTX; the node's nvcc compiles that PTX for sm_90 and its HMMA is counted
    there. The pass says so, and names the function holding it."""
    r = jit_run[("ampere", H200)]
    assert (r["outcome"], r["code_path"]) == ("pass", "ptx-jit"), r["reason"]
    detail = json.loads(r["stage_details"])["inspect"]["detail"]
    assert f"{machine_code.JIT_COUNTED} of that PTX for sm_90" in detail, detail
    assert "HMMA in _Z6tensor" in detail, detail
    assert json.loads(r["instruction_counts"])["HMMA"] >= 1


def test_a_binary_of_ptx_alone_is_counted_and_run_alike(jit_run) -> None:
    """`code=compute_80` alone: the dump of the binary has no SASS, so the node's own reading of
    it (whether the run goes on in the same round trip) differs from the farm's, which counts the
    compile: the cell still runs and passes, its HMMA counted where the card's code is."""
    r = jit_run[("ptxonly", H200)]
    assert (r["outcome"], r["code_path"]) == ("pass", "ptx-jit"), r["reason"]
    assert json.loads(r["instruction_counts"])["HMMA"] >= 1


def test_an_instruction_no_compile_for_the_card_holds_is_still_missing(jit_run) -> None:
    """Counting in the compile is no free pass: HGMMA, in no code a 9.0 card makes of sm_80 PTX."""
    r = jit_run[("hgmma", H200)]
    assert (r["outcome"], r["code_path"]) == ("inspect-fail", "ptx-jit"), r["reason"]
    assert "HGMMA (0 < 1)" in r["reason"] and machine_code.JIT_COUNTED in r["reason"], r["reason"]


def test_a_card_the_nodes_nvcc_cannot_compile_for_is_infra_not_the_kernels(jit_run) -> None:
    """A card newer than the node's toolkit (12.5; nvcc 13.0 knows no sm_125) runs the PTX
    through its driver, but the farm cannot make what it runs to count it: infra-error, naming
    nvcc's words, never inspect-fail (the kernel's) nor pass; and that card's cells do not mark
    the node unhealthy (a raised infra error did: the H200's cells of the same node went too)."""
    for variant in ("ampere", "hgmma"):
        r = jit_run[(variant, FUTURE)]
        assert r["outcome"] == "infra-error", (variant, r["outcome"], r["reason"])
        assert "could not compile the binary's PTX for the CC 12.5 card" in r["reason"], r["reason"]
        assert "is no verdict on the kernel" in r["reason"], r["reason"]
        assert "sm_125" in r["reason"], r["reason"]


def test_the_node_and_the_farm_read_the_loading_rules_alike() -> None:
    """The node decides whether to compile (node/jit.py, and its shell twin's awk), the farm what
    to count (machine_code.py): over every card and every binary of a few archs, all say the same."""
    archs = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_100f", "sm_103a", "sm_120"]
    for cc in ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"):
        card = ComputeCapability.parse(cc)
        number = card.major * 10 + card.minor
        for elf, ptx in itertools.product(itertools.combinations(archs, 1), itertools.combinations(archs, 2)):
            elf_plain = [a for a in elf if not a.endswith("f")]  # --list-elf names a family cubin sm_100
            farm = machine_code.jit_ptx(card, list(ptx)) if not machine_code.loaded_cubins(card, elf_plain) else []
            assert noderunner.jit_archs(number, elf_plain, list(ptx)) == farm, (cc, elf_plain, ptx)
            listing = "".join(f"ELF file 1: k.1.{a}.cubin\n" for a in elf_plain) + "@@ptx\n"
            listing += "".join(f"PTX file {i}: k.{i}.{a}.ptx\n" for i, a in enumerate(ptx, 1))
            awk = subprocess.run(
                ["awk", "-v", f"card={number}", jit_shell.PICK_AWK],
                input=listing,
                text=True,
                capture_output=True,
                check=True,
            )
            assert sorted(awk.stdout.split()) == farm, (cc, elf_plain, ptx, awk.stdout)
        assert noderunner.listed(b"ELF file    1: k.1.sm_80.cubin\nPTX file    1: k.1.sm_90a.ptx\n") == (
            ["sm_80"],
            ["sm_90a"],
        )
