"""Red-team round 58: the machine-code evidence behind a pass, card by card.

Fat binaries built by the real nvcc 13.0 and read by the real cuobjdump: an `instructions:`
requirement was counted over every cubin of the binary, so `HGMMA: 1` was met by the sm_90a
cubin while an A100 (8.0) ran the sm_80 one, and a B200 (10.0) compiled the sm_80 PTX at load.
The nodes are real sshd nodes whose nvidia-smi is a stand-in (tests/nodes.py)."""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cuda_farm import cuda_farm_run
from nodes import Card, Fleet
from test_verdicts import rows

from orchestrator.cli.verify import verdict_line
from orchestrator.config.capability import ComputeCapability
from orchestrator.config.farm import load_farm
from orchestrator.report import export
from orchestrator.report.model import collect
from orchestrator.run import machine_code
from orchestrator.store import Store
from orchestrator.transport.local import bundled_cuda_bin

# a kernel whose wgmma (HGMMA in SASS) is in its sm_90a cubin only, and one that never has any
HOPPER = r"""
#include <cstdint>
__global__ void hopper(float *out, uint64_t da, uint64_t db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    asm volatile("wgmma.fence.sync.aligned;");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, %4, %5, 1, 1, 1, 0, 0;"
                 : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3) : "l"(da), "l"(db));
    asm volatile("wgmma.commit_group.sync.aligned;");
    asm volatile("wgmma.wait_group.sync.aligned 0;");
    out[threadIdx.x] = a0 + a1 + a2 + a3;
#else
    out[threadIdx.x] = 1.0f;
#endif
}
"""
KERNELS = (
    HOPPER
    + r"""__global__ void plain(float *out) { out[threadIdx.x] = 2.0f; }
"""
)

FAT = (
    "-gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80 -gencode arch=compute_80,code=compute_80"
)
CARDS = {"NVIDIA GH200 480GB": "9.0", "NVIDIA A100-SXM4-80GB": "8.0", "NVIDIA B200": "10.0"}


def cuobjdump() -> Path:
    cuda_bin = bundled_cuda_bin()
    assert cuda_bin is not None
    return cuda_bin / "cuobjdump"


@pytest.fixture(scope="module")
def fat_run(ssh_fleet: Fleet, make_farm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """One farm run: the fat binary on a node holding a GH200, an A100 and a B200."""
    tmp_path = tmp_path_factory.mktemp("rt58")
    cards = [Card(name, cc, driver="580.95.05") for name, cc in CARDS.items()]
    node = ssh_fleet.add(f"fat-{tmp_path.name[-12:]}", cards)
    variants = {
        "fat": {
            "build": "{nvcc} -O1 " + FAT + " -o {binary} {sources}",
            "cc": {"min": "8.0"},
            "instructions": {"HGMMA": 1},
        },
        # the course's wgmma shape: sm_90a code alone, a gate for 9.0 (the stand-in's, in its host code)
        "hopper": {
            "build": "{nvcc} -O1 -DEXACT_CC=90 -gencode arch=compute_90a,code=sm_90a -o {binary} {sources}",
            "cc": {"exactly": "9.0"},
            "instructions": {"HGMMA": 1},
        },
    }
    lines = io.StringIO()
    summary, model = cuda_farm_run(node, tmp_path, make_farm, "fat", "rt58", variants, KERNELS, str(cuobjdump()), lines)
    found = {key: r for key, r in rows(tmp_path / "results.db", summary.run_id).items()}
    yield found, lines.getvalue(), model, summary


def test_an_instruction_met_by_a_cubin_the_card_does_not_load_is_no_pass(fat_run) -> None:
    """`-gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=[sm_80,compute_80]`
    with `instructions: {HGMMA: 1}`: the A100 (8.0) loads the sm_80 cubin, which has no HGMMA,
    and the B200 (10.0) compiles the sm_80 PTX at load. Both passed, the HGMMA counted in the
    sm_90a cubin neither card runs. Now each counts the code its card runs: inspect-fail, saying
    where it counted; the GH200 (9.0), which loads the sm_90a cubin, passes."""
    found, *_ = fat_run
    said = {card: (r["outcome"], r["code_path"], r["reason"]) for (v, card), r in found.items() if v == "fat"}
    outcome, path, reason = said["NVIDIA GH200 480GB"]
    assert (outcome, path) == ("pass", "native"), said
    outcome, path, reason = said["NVIDIA A100-SXM4-80GB"]
    assert (outcome, path) == ("inspect-fail", "native"), said
    assert "HGMMA (0 < 1)" in reason and "sm_80 cubin a CC 8.0 card loads" in reason, reason
    outcome, path, reason = said["NVIDIA B200"]
    assert (outcome, path) == ("inspect-fail", "ptx-jit"), said
    assert "compiles the binary's sm_80 PTX at load" in reason, reason
    counts = json.loads(found[("fat", "NVIDIA A100-SXM4-80GB")]["instruction_counts"])
    assert counts == {"HGMMA": 0}, counts


def test_the_cell_says_which_code_it_counted_and_what_the_inspect_cannot_see(fat_run) -> None:
    """The pass's inspect stage names the cubin counted and the function holding the HGMMA
    (`hopper`, not `plain`), and says what no dump can show: which kernels the run launched,
    or code loaded at run time (a cubin file, NVRTC)."""
    found, *_ = fat_run
    detail = json.loads(found[("fat", "NVIDIA GH200 480GB")]["stage_details"])["inspect"]["detail"]
    assert "sm_90a cubin a CC 9.0 card loads" in detail, detail
    assert "HGMMA in _Z6hopper" in detail and "plain" not in detail, detail
    assert "not which kernels the run launches nor code loaded at run time" in detail, detail


def test_a_pass_on_a_stand_in_card_says_so_on_its_own_line(fat_run) -> None:
    """The terminal and --log line of a pass on a card the driver did not confirm read
    `ok   pass ...`; "certify nothing" was on the node's line alone, far above in a long log.
    The cell's line says it too, and the run's verdict line (--log's, the CLI's) counts such
    cells; JSON and JUnit already said so."""
    _, lines, model, summary = fat_run
    passed = [line for line in lines.splitlines() if "] ok   pass " in line]
    assert passed and all("certifies nothing" in line for line in passed), lines
    assert "4 of them on stand-in cards: certify nothing" in lines.splitlines()[-1], lines  # --log's verdict
    assert "4 of them on cards the NVIDIA driver did not confirm" in verdict_line(summary)  # the CLI's stdout
    record = next(c for c in json.loads(export.as_json(model))["cells"] if c["outcome"] == "pass")
    assert record["certifies_nothing"] is True, record
    assert "sm_90a cubin a CC 9.0 card loads" in record["instructions_counted_in"], record
    assert "<skipped" in export.junit(model)


def test_which_cubin_a_card_loads() -> None:
    """CUDA's rule: the exact sm_XY, else the highest cubin of the same major below it (never
    another CC's arch-specific one), else the highest PTX at or below the CC. Arch-specific PTX
    is compiled for its own CC: `compute_90a` PTX on a 9.0 card was called no-code, and a pass
    there a fail."""
    cc = ComputeCapability.parse
    loaded_cubins, code_path_for = machine_code.loaded_cubins, machine_code.code_path_for
    assert loaded_cubins(cc("8.9"), ["sm_80", "sm_86", "sm_90a"]) == ["sm_86"]
    assert loaded_cubins(cc("9.0"), ["sm_80", "sm_90", "sm_90a"]) == ["sm_90", "sm_90a"]
    assert loaded_cubins(cc("10.3"), ["sm_100a", "sm_90a"]) == []
    assert code_path_for(cc("9.0"), [], ["sm_90a"]) == "ptx-jit"
    assert code_path_for(cc("10.0"), [], ["sm_90a"]) == "no-code"


def test_counts_in_a_real_dump_follow_the_card(tmp_path: Path) -> None:
    """On the real dump: where the card may load either of two cubins (sm_90 beside sm_90a on
    9.0) the requirement holds only if both hold it, and a kernel named HGMMA is no opcode."""
    source = tmp_path / "k.cu"
    source.write_text(KERNELS + "__global__ void HGMMA() {}\nint main() { return 0; }\n")
    binary = tmp_path / "k"
    build = ["-gencode", "arch=compute_90a,code=sm_90a", "-gencode", "arch=compute_90,code=sm_90"]
    nvcc = shutil.which("nvcc") or "nvcc"
    subprocess.run([nvcc, "-O1", *build, "-o", str(binary), str(source)], check=True, timeout=300)
    dump = subprocess.run([cuobjdump(), "--dump-sass", binary], capture_output=True, text=True, check=True).stdout
    nine, count_for_card = ComputeCapability.parse("9.0"), machine_code.count_for_card
    both = count_for_card(dump, ["HGMMA"], nine, ["sm_90", "sm_90a"], [])
    assert both.counts == {"HGMMA": 0}, both
    only_a = count_for_card(dump, ["HGMMA"], nine, ["sm_90a"], [])
    assert only_a.counts == {"HGMMA": 1}, only_a
    assert count_for_card(dump, ["HGMMA"], None, ["sm_90", "sm_90a"], []).counts == {"HGMMA": 1}


def test_a_card_the_kernel_must_refuse_is_not_inspected_for_code_it_never_runs(fat_run) -> None:
    """The course's wgmma shape (sm_90a code alone, `cc: {exactly: "9.0"}`): an A100 and a B200
    must be refused by the kernel's gate, which is host code. Counted for the card they had no
    HGMMA (no cubin they load) and were inspect-fail, the gate never run; what the requirement
    is about is the cards the contract serves, so there the whole dump counts."""
    found, *_ = fat_run
    said = {card: r["outcome"] for (v, card), r in found.items() if v == "hopper"}
    assert said == {
        "NVIDIA GH200 480GB": "pass",
        "NVIDIA A100-SXM4-80GB": "expected-refusal",
        "NVIDIA B200": "expected-refusal",
    }, said


def test_a_family_cubin_is_counted_for_its_family(tmp_path: Path) -> None:
    """cuobjdump's dump heads a family cubin `arch = sm_100f`, while its --list-elf (the code
    path's source) names it `sm_100`: read by the dump's name, a `compute_100f,code=sm_100f`
    build had nothing counted on a B200 or a GB300, a false inspect-fail."""
    source = tmp_path / "k.cu"
    source.write_text(KERNELS + "int main() { return 0; }\n")
    binary = tmp_path / "k"
    nvcc = shutil.which("nvcc") or "nvcc"
    build = ["-gencode", "arch=compute_100f,code=sm_100f"]
    subprocess.run([nvcc, "-O1", *build, "-o", str(binary), str(source)], check=True, timeout=300)
    dump = subprocess.run([cuobjdump(), "--dump-sass", binary], capture_output=True, text=True, check=True).stdout
    listed = subprocess.run([cuobjdump(), "--list-elf", binary], capture_output=True, text=True, check=True).stdout
    elf = sorted({f"sm_{a}{s}" for a, s in machine_code.ELF_TARGETS.findall(listed)})
    assert elf == ["sm_100"] and "arch = sm_100f" in dump, (elf, dump[:300])
    for cc in ("10.0", "10.3"):
        counted = machine_code.count_for_card(dump, ["STG"], ComputeCapability.parse(cc), elf, [])
        assert counted.counts["STG"] >= 2, counted


def _course_model(db: Path) -> Any:
    root = Path(__file__).resolve().parent.parent
    store = Store(f"sqlite:///{db}")
    try:
        return collect(store, None, load_farm(root / "farm.yaml"))
    finally:
        store.close()


def _say_counted(db: Path, detail: str) -> None:
    """Every ptx-jit row's inspect detail said `detail`."""
    with sqlite3.connect(db) as conn:
        for rid, stages in conn.execute("SELECT id, stage_details FROM results WHERE code_path = 'ptx-jit'").fetchall():
            stages = json.loads(stages or "{}")
            stages.setdefault("inspect", {"status": "ok"})["detail"] = detail
            conn.execute("UPDATE results SET stage_details = ? WHERE id = ?", (json.dumps(stages), rid))


def test_ptx_jit_passes_back_their_instructions_only_where_counted_in_the_cards_own_compile(tmp_path: Path) -> None:
    """The course's own record: both cutlass builds passed on the H200 (CC 9.0) through PTX compiled
    at load, their `HMMA` counted (before round 58) in sm_75 / sm_80 cubins the H200 never ran, and
    stayed green and VERIFIED. Such a pass is grey, and the ledger says why; one whose inspect
    counted them in the node nvcc's compile of that PTX for the card (node/jit.py) certifies.
    wgmma's native pass is left as it is either way."""
    root = Path(__file__).resolve().parent.parent
    db = tmp_path / "results.db"
    shutil.copy(root / "results.db", db)
    _say_counted(db, "counted over the whole dump")
    model = _course_model(db)
    moot = {key[:2]: why for key, why in model.rejudged.items() if "ptx-jit" in why}
    assert set(moot) == {("cutlass_gemm", "sm75"), ("cutlass_gemm", "sm80")}, model.rejudged
    assert all("it certifies once it runs again" in why for why in moot.values()), moot
    cutlass = next(entry for entry in model.ledgers if entry.kernel == "cutlass_gemm")
    assert any(kind == "instructions-unbacked" and "CC 9.0" in why for kind, why in cutlass.flags), cutlass.flags
    wgmma = next(entry for entry in model.ledgers if entry.kernel == "wgmma_gemm")
    assert not any(kind == "instructions-unbacked" for kind, _ in wgmma.flags), wgmma.flags
    _say_counted(db, f"SASS names {machine_code.JIT_COUNTED} of that PTX for sm_90")
    model = _course_model(db)
    assert not any("ptx-jit" in why for why in model.rejudged.values()), model.rejudged
    cutlass = next(entry for entry in model.ledgers if entry.kernel == "cutlass_gemm")
    assert not any(kind == "instructions-unbacked" for kind, _ in cutlass.flags), cutlass.flags


def test_a_dump_with_no_parts_and_a_cubin_of_no_functions_are_counted_whole() -> None:
    """A dump cuobjdump did not cut into parts (another tool's, a stand-in's) counts whole, and a
    cubin part without a `Function :` line names no holder: both raised ValueError (an internal
    error, exit 70) while this round's change was being made."""
    nine = ComputeCapability.parse("9.0")
    loose = machine_code.count_for_card("/*0000*/ HMMA.16816 R0, R1 ;\n", ["HMMA"], nine, [], [])
    assert loose.counts == {"HMMA": 1}, loose
    bare = "Fatbin elf code:\n====\narch = sm_90\n/*0000*/ HMMA.16816 R0, R1 ;\n"
    counted = machine_code.count_for_card(bare, ["HMMA"], nine, ["sm_90"], [])
    assert counted.counts == {"HMMA": 1} and "HMMA in no function" in counted.where, counted
