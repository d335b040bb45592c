"""Red-team round 63: the machine-code evidence behind a pass, after the node's compile of the PTX a card JITs.

Binaries built by the real nvcc 13.0 and read by the real cuobjdump, run through the farm on real
sshd nodes whose nvidia-smi is a stand-in (tests/nodes.py): a PTX name met by a `.pragma` string;
parts of cuobjdump's dump forged in a PTX string; round 58's finding back through an inspect that
names cuobjdump by its path; a SASS name met by a name in x86 objdump's text or in a dump of no
code; a compile of the PTX a card JITs whose text lost a target; stored passes of the old reading."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cuda_farm import cuda_farm_run
from nodes import Card, Fleet
from test_redteam58 import cuobjdump
from test_verdicts import rows

from orchestrator.config.capability import ComputeCapability
from orchestrator.report.rejudged import jit_unbacked
from orchestrator.run import machine_code

# a kernel named HMMA (its host stub too), holding no HMMA; `told` holds no mma.sync, but its PTX holds the
# words in a `.pragma` string (ptxas only warns of it); `tensor` holds a real mma.sync where
# TENSOR_CODE is defined and the arch is 8.0 or later
KERNELS = r"""
extern "C" __global__ void HMMA(float *out) { out[threadIdx.x] = 4.0f; }
__global__ void told(float *out) {
    asm volatile(".pragma \"mma.sync.aligned.m16n8k16 wgmma.mma_async\";");
    out[threadIdx.x] = 1.0f;
}
#ifdef FORGE
// a PTX string may hold newlines (ptxas only warns of the pragma), and a backslash is no escape
// in it ("a\" ends there): a dump that prints the PTX prints the lines of the second as they
// are, heads of parts of cuobjdump's own included
__global__ void forger(float *out) {
    asm volatile(".pragma \"a\\\"; .pragma \"x\nFatbin elf code:\n================\narch = sm_90\n"
                 "        /*0000*/                   HMMA.16816.F32 R0, R0, R0, R0 ;\n"
                 "Fatbin ptx code:\n================\narch = sm_80\nmma.sync.aligned.m16n8k16;\n\";");
    out[threadIdx.x] = 3.0f;
}
#endif
__global__ void tensor(float *out, const unsigned *a, const unsigned *b) {
#if defined(TENSOR_CODE) && __CUDA_ARCH__ >= 800 && !(defined(PLAIN_ONLY) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
    float c0 = 0, c1 = 0, c2 = 0, c3 = 0;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    out[threadIdx.x] = c0 + c1 + c2 + c3;
#else
    out[threadIdx.x] = 2.0f;
#endif
}
"""
H200, T4 = "NVIDIA H200", "Tesla T4"
PTX_DUMP = "{cuobjdump} -ptx {binary}"
SM80 = "{nvcc} -O1 -arch=sm_80 -o {binary} {sources}"
# HMMA in the sm_90 cubin; the sm_75 one, which a T4 loads, holds none
FAT = "{nvcc} -O1 -DTENSOR_CODE -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=sm_75"


@pytest.fixture(scope="module")
def run63(ssh_fleet: Fleet, make_farm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One farm run on a node holding an H200 (9.0: sm_80 builds are ptx-jit there) and a T4 (7.5)."""
    tmp_path = tmp_path_factory.mktemp("rt63")
    cards = [Card(H200, "9.0", driver="580.95.05"), Card(T4, "7.5", driver="580.95.05")]
    node = ssh_fleet.add(f"rt63-{tmp_path.name[-12:]}", cards)
    # its path outside /tmp, as a node's toolkit is (a disassembler under /tmp is refused at load:
    # stage_commands.py); a CI checkout, its virtual environment with it, may itself be under /tmp
    outside = Path.home() / ".cache" / "farm-tests" / f"cuda-bin-{os.getpid()}"
    outside.parent.mkdir(parents=True, exist_ok=True)
    if not outside.is_symlink():
        outside.symlink_to(cuobjdump().parent)
    tool = str(outside / "cuobjdump")
    min80, min75 = {"cc": {"min": "8.0"}}, {"cc": {"min": "7.5"}}
    variants = {
        "pragma": {"build": SM80, "inspect": PTX_DUMP, **min80, "instructions": {"mma.sync": 1}},
        "ptxreal": {
            "build": SM80.replace("-O1", "-O1 -DTENSOR_CODE"),
            "inspect": PTX_DUMP,
            **min80,
            "instructions": {"mma.sync": 1},
        },
        # cuobjdump named by its path, not as the farm's {cuobjdump}: the same dump of the same binary
        "bypath": {
            "build": FAT + " -o {binary} {sources}",
            "inspect": tool + " -sass {binary}",
            **min75,
            "instructions": {"HMMA": 1},
        },
        # a dump holding the PTX, whose text the kernel wrote: a native card and a ptx-jit one
        "forged": {
            "build": "{nvcc} -O1 -DFORGE -gencode arch=compute_90,code=[sm_90,compute_90] -o {binary} {sources}",
            "inspect": "{cuobjdump} -sass -ptx {binary}",
            **min80,
            "instructions": {"HMMA": 1},
        },
        "forgedptx": {
            "build": SM80.replace("-O1", "-O1 -DFORGE"),
            "inspect": PTX_DUMP,
            **min80,
            "instructions": {"mma.sync": 1},
        },
        # PTX of compute_90 and compute_90a, HMMA in the first only: a 9.0 card may compile either
        "twoarch": {
            "build": "{nvcc} -O1 -DTENSOR_CODE -DPLAIN_ONLY -gencode arch=compute_90,code=compute_90 "
            "-gencode arch=compute_90a,code=compute_90a -o {binary} {sources}",
            **min80,
            "instructions": {"HMMA": 1},
        },
        # cuobjdump's list of the SASS text sections: names, no code ("x-HMMA.sm_90.elf.bin")
        "ltext": {
            "build": "{nvcc} -O1 -arch=sm_90 -o {binary} {sources}",
            "inspect": "{cuobjdump} -ltext {binary}",
            **min80,
            "instructions": {"HMMA": 1},
        },
        # x86 objdump's text of the host code: no SASS in it, whatever it names
        "host": {"build": SM80, "inspect": "objdump -d {binary}", **min80, "instructions": {"HMMA": 1}},
    }
    try:
        summary, _ = cuda_farm_run(node, tmp_path, make_farm, "rt63", "rt63", variants, KERNELS, tool)
    finally:
        outside.unlink(missing_ok=True)
    yield rows(tmp_path / "results.db", summary.run_id)


def test_a_ptx_name_in_a_pragma_string_is_no_instruction(run63) -> None:
    """`mma.sync: 1` counted in the PTX an H200 compiles at load (`{cuobjdump} -ptx`): a kernel with
    no mma.sync passed on the words in its `.pragma "mma.sync..."` (fatbinary strips comments, not
    directives' strings). PTX names now count as the opcodes of PTX statements only."""
    r = run63[("pragma", H200)]
    assert r["code_path"] == "ptx-jit", r["reason"]
    assert r["outcome"] == "inspect-fail", (r["outcome"], r["reason"])
    assert json.loads(r["instruction_counts"])["mma.sync"] == 0
    real = run63[("ptxreal", H200)]
    assert (real["outcome"], real["code_path"]) == ("pass", "ptx-jit"), real["reason"]
    assert json.loads(real["instruction_counts"])["mma.sync"] >= 1


def test_cuobjdump_named_by_its_path_counts_in_the_code_the_card_loads(run63) -> None:
    """Round 58's finding back: an inspect naming cuobjdump by its path (not `{cuobjdump}`) was
    read as another disassembler's text, counted whole: a T4 (7.5), which loads the sm_75 cubin
    holding no HMMA, passed on the sm_90 cubin's HMMA, with no code path said. It now counts, as
    `{cuobjdump}` does, in the cubin the card loads."""
    r = run63[("bypath", T4)]
    assert r["code_path"] == "native", (r["code_path"], r["reason"])
    assert r["outcome"] == "inspect-fail", (r["outcome"], r["reason"])
    assert "HMMA (0 < 1)" in r["reason"], r["reason"]
    hopper = run63[("bypath", H200)]
    assert (hopper["outcome"], hopper["code_path"]) == ("pass", "native"), hopper["reason"]


def test_a_part_of_the_dump_forged_in_a_ptx_string_counts_nothing(run63) -> None:
    """A dump that prints the binary's PTX (`-sass -ptx`, `-ptx`) prints the kernel's `.pragma`
    strings, newlines and all: a string holding "Fatbin elf code: / arch = sm_90" and a SASS line
    made a part of its own, an sm_90 cubin's with HMMA (an H200 loads the real one, holding none),
    and "Fatbin ptx code: / arch = sm_80" one with mma.sync (an H200 compiles the real sm_80 PTX).
    Both passed. A head inside a string or comment of the PTX is no part's head."""
    native = run63[("forged", H200)]
    assert native["code_path"] == "native", native["reason"]
    assert native["outcome"] == "inspect-fail", (native["outcome"], native["reason"])
    jit = run63[("forgedptx", H200)]
    assert jit["code_path"] == "ptx-jit", jit["reason"]
    assert jit["outcome"] == "inspect-fail", (jit["outcome"], jit["reason"])
    assert json.loads(jit["instruction_counts"]) == {"mma.sync": 0}


def test_a_sass_name_in_a_host_disassembly_is_no_instruction(run63) -> None:
    """`inspect: objdump -d {binary}` with `HMMA: 1` on an H200: x86 objdump's text holds no
    SASS, but the host stub of a kernel named HMMA (`<HMMA>:`) was counted as one, and the cell passed with
    no GPU instruction seen. On a card that must run the binary a SASS name counts as an opcode of
    SASS only."""
    r = run63[("host", H200)]
    assert r["outcome"] == "inspect-fail", (r["outcome"], r["reason"])
    assert json.loads(r["instruction_counts"]) == {"HMMA": 0}


def test_a_sass_name_in_a_dump_of_no_code_is_no_instruction(run63) -> None:
    """`{cuobjdump} -ltext {binary}` lists the binary's SASS sections by name, no part of code in
    it: counted whole, its kernel named HMMA ("SASS text section 1 : x-HMMA.sm_90.elf.bin") met
    `HMMA: 1` on an H200. A dump cuobjdump did not cut into parts, for a card that must run the
    binary, holds a SASS name only as an opcode."""
    r = run63[("ltext", H200)]
    assert r["outcome"] == "inspect-fail", (r["outcome"], r["reason"])
    assert json.loads(r["instruction_counts"]) == {"HMMA": 0}


def test_ptx_names_count_only_as_ptx_opcodes() -> None:
    """The PTX reading itself: a directive's string, a comment, a label are no instruction; a
    predicated one and one after a label are."""
    ptx = (
        "Fatbin ptx code:\n================\narch = sm_80\n"
        '.pragma "mma.sync.aligned";\n// mma.sync.aligned\n/* wgmma.mma_async */\n'
        '.pragma "x\nmma.sync.aligned.m16n8k16;\nwgmma.mma_async.sync;\n";\n'
        "@%p1 mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f1};\n"
        "$L__BB0_1: mma.sync.aligned.m16n8k16 {%f1}, {%r1}, {%r2}, {%f1}; wgmma.fence.sync.aligned;\n"
    )
    counted = machine_code.count_for_card(
        ptx, ["mma.sync", "wgmma.mma_async", "wgmma.fence"], ComputeCapability.parse("9.0"), [], ["sm_80"]
    )
    assert counted.counts == {"mma.sync": 2, "wgmma.mma_async": 0, "wgmma.fence": 1}, counted.counts


def test_ptx_of_two_archs_at_one_number_must_each_hold_it(run63) -> None:
    """compute_90 and compute_90a PTX on an H200: the node compiles each (sm_90, sm_90a); HMMA in
    the compute_90 one alone is no pass, the driver may take the other."""
    r = run63[("twoarch", H200)]
    assert r["code_path"] == "ptx-jit", r["reason"]
    assert r["outcome"] == "inspect-fail", (r["outcome"], r["reason"])
    assert "sm_90 and sm_90a" in r["reason"], r["reason"]


def test_a_target_missing_from_the_nodes_compile_counts_nothing() -> None:
    """PTX of compute_90 and compute_90a on a 9.0 card: either may be what it compiles, so an
    instruction must be in both compiles. Where the sm_90a one is not in the text read back (its
    frame cut at the limit), the sm_90 one alone met the requirement; a target missing counts 0."""
    sass = "\n\tcode for sm_90\n\t\tFunction : k\n        /*0000*/                   HMMA.16816.F32 R0, R0, R0, R0 ;\n"
    nine = ComputeCapability.parse("9.0")
    fat = "Fatbin ptx code:\n================\narch = sm_90\n" + ".version 9.0\n"
    counted = machine_code.count_for_card(fat, ["HMMA"], nine, [], ["sm_90", "sm_90a"], (sass, ""))
    assert counted.counts == {"HMMA": 0}, counted
    both = sass + sass.replace("sm_90", "sm_90a")
    assert machine_code.count_for_card(fat, ["HMMA"], nine, [], ["sm_90", "sm_90a"], (both, "")).counts == {"HMMA": 1}


def test_a_stored_ptx_jit_pass_on_ptx_names_read_as_words_is_not_current() -> None:
    """A pass stored before this round, on a card that compiled the binary's PTX at load, whose
    variant counts a PTX name: it was counted as a word of the PTX (a `.pragma` string met it),
    so the report holds it grey until it runs again; one counted as opcodes stands."""
    old = {"inspect": {"detail": "a CC 9.0 card compiles ...; PTX names count in that PTX; the inspect sees ..."}}
    why = jit_unbacked("ptx-jit", {"mma.sync": 1}, "9.0", old)
    assert why is not None and "mma.sync" in why and "runs again" in why, why
    counted = machine_code.count_for_card(
        "Fatbin ptx code:\n================\narch = sm_80\nmma.sync.aligned.m16n8k16 {%f1};\n",
        ["mma.sync"],
        ComputeCapability.parse("9.0"),
        [],
        ["sm_80"],
    )
    assert jit_unbacked("ptx-jit", {"mma.sync": 1}, "9.0", {"inspect": {"detail": counted.where}}) is None
    # SASS names alone are judged as round 58 left them; a native pass on PTX names is held until its
    # detail says they were counted in the cubin's own PTX (round 73: they were words of its dump)
    assert jit_unbacked("native", {"HMMA": 1}, "9.0", old) is None
    assert jit_unbacked("native", {"mma.sync": 1}, "9.0", old) is not None
