"""Red-team round 73: PTX names in `instructions:` on a card that runs the binary's own cubin.

A variant's `instructions:` may name PTX instructions (`mma.sync`, `wgmma.mma_async`). On a card
that loads a cubin of the binary (native) they were searched as words of that cubin's SASS: never
an opcode there, so `mma.sync: 1` on an `-arch=sm_80` build was the kernel's inspect-fail on an
A100 although the binary embeds the compute_80 PTX its sm_80 cubin was compiled from, and that
PTX holds mma.sync; and a kernel named `ldmatrix` met `ldmatrix: 1` through its `Function :` line.
Real nvcc 13.0 and cuobjdump, real sshd nodes, stand-in cards (tests/nodes.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cuda_farm import cuda_farm_run
from nodes import CARDS, Card, Fleet
from test_ptx_jit import TENSOR
from test_redteam52 import REAL_NVCC
from test_redteam58 import HOPPER, cuobjdump
from test_verdicts import rows

from orchestrator.classify import Evidence, classify
from orchestrator.config.capability import ComputeCapability
from orchestrator.report.rejudged import jit_unbacked
from orchestrator.run import machine_code

# `tensor` holds an mma.sync (HMMA in SASS) where compiled for 8.0 or later; `ldmatrix` is a kernel
# named as a PTX instruction it never holds
KERNELS = (
    TENSOR
    + r"""
extern "C" __global__ void ldmatrix(float *out) { out[threadIdx.x] = 2.0f; }
"""
)
# wgmma (HGMMA in SASS) in the sm_90a code alone
A100 = Card(CARDS["a100"].name, "8.0", driver="580.95.05")
H100 = Card(CARDS["h100"].name, "9.0", driver="580.95.05")
BOTH = "{cuobjdump} -sass -ptx {binary}"
EIGHT = ComputeCapability.parse("8.0")


def _built(tmp: Path, flags: str, source: str = KERNELS) -> tuple[str, list[str], list[str], str]:
    """(the `-sass -ptx` dump, cubin archs, PTX archs, the `--dump-sass` dump) of a real build."""
    (tmp / "k.cu").write_text(source + "int main() { return 0; }\n")
    subprocess.run([REAL_NVCC, "-O1", *flags.split(), "-o", str(tmp / "k"), str(tmp / "k.cu")], check=True)

    def said(*args: str) -> str:
        done = subprocess.run([str(cuobjdump()), *args, str(tmp / "k")], capture_output=True, text=True)
        return done.stdout + done.stderr

    elf = sorted({f"sm_{a}{s}" for a, s in machine_code.ELF_TARGETS.findall(said("--list-elf"))})
    ptx = sorted({f"sm_{a}{s}" for a, s in machine_code.PTX_TARGETS.findall(said("--list-ptx"))})
    return said("-sass", "-ptx"), elf, ptx, said("--dump-sass")


def test_a_ptx_name_counts_in_the_ptx_the_cards_cubin_was_compiled_from(tmp_path: Path) -> None:
    """`-arch=sm_80` embeds the sm_80 cubin and the compute_80 PTX it was compiled from: an A100
    runs the cubin, and `mma.sync: 1` counted nothing there (no PTX name is a SASS opcode), the
    kernel's inspect-fail although its PTX holds mma.sync. It counts in that PTX, and says so."""
    dump, elf, ptx, _ = _built(tmp_path, "-arch=sm_80")
    assert (elf, ptx) == (["sm_80"], ["sm_80"])
    counted = machine_code.count_for_card(dump, ["mma.sync", "HMMA"], EIGHT, elf, ptx)
    assert counted.counts["mma.sync"] >= 1 and counted.counts["HMMA"] >= 1, counted
    said = "PTX names counted in the binary's compute_80 PTX, from which the sm_80 cubin the card runs was compiled"
    assert said in counted.where, counted.where


def test_a_kernel_named_as_a_ptx_instruction_is_no_instruction(tmp_path: Path) -> None:
    """`ldmatrix: 1` on an A100, the inspect `--dump-sass` (the default): the PTX name was searched as
    a word of the sm_80 cubin's SASS, and a kernel named `ldmatrix` (`Function : ldmatrix`) met it,
    with no ldmatrix anywhere in the binary. Nothing of a cubin's dump counts for a PTX name."""
    dump, elf, ptx, sass = _built(tmp_path, "-arch=sm_80")
    for text in (sass, dump):
        counted = machine_code.count_for_card(text, ["ldmatrix"], EIGHT, elf, ptx)
        assert counted.counts == {"ldmatrix": 0}, (counted, text[:200])


def test_no_ptx_of_the_cubins_arch_is_no_verdict_on_the_kernel(tmp_path: Path) -> None:
    """`-gencode arch=compute_80,code=sm_80` embeds the cubin alone: no PTX the farm can count
    `mma.sync` in. The kernel's inspect-fail was a false red; it is infra-error, saying to embed
    the PTX or name SASS opcodes. So is a dump that does not print the PTX the binary embeds."""
    cases = [(*_built(tmp_path, "-gencode arch=compute_80,code=sm_80")[:3], "-arch=sm_80")]
    _, elf, ptx, sass = _built(tmp_path, "-arch=sm_80")
    cases.append((sass, elf, ptx, "-sass -ptx"))  # `--dump-sass` heads the PTX's part, printing none of it
    for dump, elf, ptx, how in cases:
        counted = machine_code.count_for_card(dump, ["mma.sync"], EIGHT, elf, ptx)
        assert counted.counts == {"mma.sync": 0}, counted
        ev = Evidence(build_exit=0, inspect_exit=0, missing_instructions={"mma.sync": (0, 1)})
        ev.counted_in, ev.ptx_uncounted = counted.where, counted.uncounted  # as the inspect stage sets them
        must = pytest.importorskip("test_classify").MUST_RUN
        verdict = classify(ev, must)
        assert verdict.outcome.value == "infra-error", (verdict, ptx)
        assert how in verdict.reason and "name SASS opcodes instead" in verdict.reason, verdict.reason


def test_a_stored_native_pass_on_ptx_names_read_as_words_is_not_current() -> None:
    """A pass stored before this round on a native card whose variant counts a PTX name met it as a
    word of the cubin's dump (a kernel's name): the ledger flags it (`instructions-unbacked`) until it
    runs again; one counted in the cubin's own PTX stands."""
    old = {"inspect": {"detail": "counted in the sm_80 cubin a CC 8.0 card loads; ldmatrix in ldmatrix; ..."}}
    why = jit_unbacked("native", {"ldmatrix": 1}, "8.0", old)
    assert why is not None and "ldmatrix" in why and "runs again" in why, why
    assert jit_unbacked("native", {"HMMA": 1}, "8.0", old) is None
    # a lower-case name of another disassembler's text (objdump's `ret`) is no PTX name
    assert jit_unbacked("native", {"ret": 1}, "8.0", old, "objdump -d {binary}") is None


@pytest.fixture(scope="module", params=["resident", "shell"])
def run73(
    request: pytest.FixtureRequest, ssh_fleet: Fleet, make_farm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    """One farm run on a node holding an A100 (8.0) and an H100 (9.0), through the node's resident
    python runner and through the shell scripts of a node it does not serve."""
    tmp_path = tmp_path_factory.mktemp("rt73")
    node = ssh_fleet.add(f"rt73-{request.param[:3]}-{tmp_path.name[-8:]}", [A100, H100])
    ampere = {"cc": {"exactly": "8.0"}, "instructions": {"mma.sync": 1}}
    nvcc = "{nvcc} -O1 -DEXACT_CC=80 "
    variants = {
        "arch": {"build": nvcc + "-arch=sm_80 -o {binary} {sources}", "inspect": BOTH, **ampere},
        "cubinonly": {
            "build": nvcc + "-gencode arch=compute_80,code=sm_80 -o {binary} {sources}",
            "inspect": BOTH,
            **ampere,
        },
        "named": {
            "build": nvcc + "-arch=sm_80 -o {binary} {sources}",
            "cc": {"exactly": "8.0"},
            "instructions": {"ldmatrix": 1},
        },
        "sm90a": {
            "build": "{nvcc} -O1 -DEXACT_CC=90 -gencode arch=compute_90a,code=[sm_90a,compute_90a] "
            "-o {binary} {sources}",
            "inspect": BOTH,
            "cc": {"exactly": "9.0"},
            "instructions": {"wgmma.mma_async": 1, "HGMMA": 1},
        },
    }
    summary, _ = cuda_farm_run(
        node, tmp_path, make_farm, "rt73", "rt73", variants, KERNELS + HOPPER, str(cuobjdump()), runner=request.param
    )
    yield rows(tmp_path / "results.db", summary.run_id)


def test_the_farm_counts_a_ptx_name_in_the_cubins_own_ptx(run73) -> None:
    """An A100 runs the `-arch=sm_80` build's cubin: `mma.sync: 1` passes on its compute_80 PTX;
    an H100 runs the sm_90a cubin: `wgmma.mma_async: 1` passes on its compute_90a PTX."""
    r = run73[("arch", A100.name)]
    assert (r["outcome"], r["code_path"]) == ("pass", "native"), r["reason"]
    assert "compute_80 PTX, from which the sm_80 cubin" in json.loads(r["stage_details"])["inspect"]["detail"]
    h = run73[("sm90a", H100.name)]
    assert (h["outcome"], h["code_path"]) == ("pass", "native"), h["reason"]


def test_the_farm_greys_a_ptx_name_it_cannot_count(run73) -> None:
    """The cubin alone (`code=sm_80`): infra-error saying how to embed the PTX, not inspect-fail."""
    r = run73[("cubinonly", A100.name)]
    assert r["outcome"] == "infra-error", (r["outcome"], r["reason"])
    assert "code=[sm_80,compute_80]" in r["reason"], r["reason"]


def test_the_farm_passes_no_ptx_name_on_a_kernels_name(run73) -> None:
    """`ldmatrix: 1` met by a kernel named ldmatrix in the default `--dump-sass` was a pass."""
    r = run73[("named", A100.name)]
    assert r["outcome"] != "pass", r["reason"]
    assert json.loads(r["instruction_counts"]) == {"ldmatrix": 0}
