"""Red-team round 54: cards and toolchains the farm had never seen.

Real sshd nodes whose nvidia-smi stand-in reports cards no test had used (RTX 5090, B200, a driver
older than the node's nvcc), and the real nvcc 13.0 of this machine, which cannot target sm_50 to
sm_72 (`nvcc --list-gpu-arch`)."""

from __future__ import annotations

from pathlib import Path

from nodes import Card, Fleet, query, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

from orchestrator.classify.blame import unsupported_arch
from orchestrator.config.capability import ComputeCapability
from orchestrator.run.machine_code import code_path_for
from orchestrator.transport.local import bundled_cuda_bin

# a real CUDA program: with no GPU (and no libcuda) on this machine, its cudaMalloc fails as it
# does on a node whose driver is too old for the runtime nvcc linked in
CUDA_SOURCE = """#include <cstdio>
#ifdef BROKEN
#error nvcc fatal   : Unsupported gpu architecture 'sm_70'
#endif
__global__ void touch(int *p) { p[threadIdx.x] += 1; }
int main() {
    int *d = nullptr;
    cudaError_t e = cudaMalloc(&d, 64);
    if (e != cudaSuccess) { fprintf(stderr, "rt54: CUDA error: %s\\n", cudaGetErrorString(e)); return 1; }
    touch<<<1, 16>>>(d);
    printf("standin: PASS\\n");
    return 0;
}
"""


# what nvcc 10 to 11 said for a target they did not know
OLD_NVCC = b"nvcc fatal   : Value 'sm_30' is not defined for option 'gpu-architecture'\n"


def cuda_job(variants: dict[str, dict[str, object]]) -> dict:
    return standin_job("rt54", variants, sources=["kernels/rt54.cu"])


def cuda_variant(build: str, contract: dict[str, str]) -> dict[str, object]:
    return {"build": build, "cc": contract}


def test_a_build_for_an_arch_the_nodes_nvcc_cannot_target_is_the_toolchains_not_the_kernels(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """nvcc 13.0 dropped sm_50 to sm_72: `-arch=sm_70` ends at once with "nvcc fatal : Unsupported
    gpu architecture 'sm_70'". The cell was build-fail, the kernel's own failure (a regression on
    the ledger) though the kernel's source was never read: the node's toolchain cannot make code
    for that card. It is now infra-error, naming the architecture and the nvcc, retried never and
    counted against no node's health (the variants after it still run); a declared known failure
    of the build still applies."""
    cuda_bin = bundled_cuda_bin()
    assert cuda_bin is not None
    variants = {
        "a70": cuda_variant("{nvcc} -arch=sm_70 -o {binary} {sources}", {"exactly": "7.0"}),
        "b62": cuda_variant("{nvcc} -gencode arch=compute_62,code=sm_62 -o {binary} {sources}", MIN75),
        "c72": cuda_variant("{nvcc} -arch=compute_72 -o {binary} {sources}", MIN75),
        "d70-declared": {
            **cuda_variant("{nvcc} -arch=sm_70 -o {binary} {sources}", MIN75),
            "known_failures": [{"when": {"nvcc": ">=13.0"}, "outcome": "build-fail", "reason": "sm_70 left CUDA 13"}],
        },
        "e-broken": cuda_variant("{nvcc} -arch=sm_75 -DBROKEN -o {binary} {sources}", MIN75),
        "e-typo": cuda_variant("{nvcc} -arch=sm_79 -o {binary} {sources}", MIN75),  # no card's: the job's
        "f75": cuda_variant("{nvcc} -arch=sm_75 -o {binary} {sources}", MIN75),
    }
    nodes = {"box": ssh_fleet["nogpu"].farm_entry(tmp_path / "work", cuobjdump=str(cuda_bin / "cuobjdump"))}
    config = make_farm(tmp_path, nodes, [cuda_job(variants)])
    (tmp_path / "kernels" / "rt54.cu").write_text(CUDA_SOURCE)
    _, summary = run(config)
    found = {v: r for (v, _), r in rows(tmp_path / "results.db", summary.run_id).items()}
    said = {v: (r["outcome"], r["reason"]) for v, r in found.items()}
    for name, arch in (("a70", "sm_70"), ("b62", "compute_62"), ("c72", "compute_72")):
        outcome, reason = said[name]
        assert outcome == "infra-error", said
        assert arch in reason and "13.0" in reason and "not the kernel" in reason, reason
    assert said["d70-declared"][0] == "known-failure", said
    assert unsupported_arch(OLD_NVCC, "nvcc -arch=sm_30 -o k k.cu", "10.2.89") == "sm_30 (nvcc 10.2.89)"
    # the kernel's own build failure stays its own, whatever its #error says
    assert said["e-broken"][0] == "build-fail", said
    assert said["e-typo"][0] == "build-fail", said
    assert said["f75"][0] == "compile-only", said


def test_a_node_whose_driver_is_older_than_its_nvcc_fails_no_kernel(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A binary nvcc 13.0 built needs driver 580 or later: on a node whose driver is 470 (CUDA 11.4)
    every CUDA call fails with "CUDA driver version is insufficient for CUDA runtime version", and
    each cell was `fail`, the kernel's regression, where the node's driver is at fault. Such a
    cell is now infra-error, naming the driver and the nvcc; a node with a driver that is new
    enough still judges the same failure the kernel's, and a kernel that ran as it must (the
    stand-in, with no CUDA code) is not touched."""
    cuda_bin = bundled_cuda_bin()
    assert cuda_bin is not None
    old = ssh_fleet.add(f"old-{tmp_path.name[-12:]}", Card("Tesla T4", "7.5", driver="470.82.01"))
    new = ssh_fleet.add(f"new-{tmp_path.name[-12:]}", Card("Tesla T4", "7.5", driver="580.95.05"))
    variants = {"sm75": cuda_variant("{nvcc} -arch=sm_75 -o {binary} {sources}", MIN75)}
    plain = {"plain": standin_variant("PASS", MIN75, "MIN_CC=75")}
    try:
        nodes = {
            name: node.farm_entry(tmp_path / f"work-{name}", cuobjdump=str(cuda_bin / "cuobjdump"))
            for name, node in (("old", old), ("new", new))
        }
        config = make_farm(tmp_path, nodes, [cuda_job(variants), standin_job("standin", plain)])
        (tmp_path / "kernels" / "rt54.cu").write_text(CUDA_SOURCE)
        _, summary = run(config)
    finally:
        old.stop()
        new.stop()
    found = {
        (r["node"], r["kernel"]): (r["outcome"], r["reason"])
        for r in query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    }
    outcome, reason = found[("old", "rt54")]
    assert outcome == "infra-error", found
    assert "470.82.01" in reason and "13.0" in reason and "580" in reason, reason
    assert found[("new", "rt54")][0] == "fail", found
    assert found[("old", "standin")][0] == "pass", found


def test_a_card_whose_name_holds_a_comma_is_a_card(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """nvidia-smi's CSV does not quote a name: a card named with a comma (and other than ASCII)
    gave a row of seven fields, which the probe skipped without a word. A node that declares no
    `cc` (farm.yaml's `local`) then had no GPU: a green row of compile-only cells for a node with a
    card, never run. The row is now read from both ends (index and UUID, then CC, driver and
    memory), the name whatever lies between."""
    card = Card("NVIDIA RTX PRO 6000 Blackwell, Max-Q – édition", "12.0", driver="580.95.05")
    node = ssh_fleet.add(f"comma-{tmp_path.name[-12:]}", card)
    variants = {"p": standin_variant("PASS", MIN75, "MIN_CC=75"), "x": standin_variant("PASS", {"max": "9.0"})}
    try:
        entry = node.farm_entry(tmp_path / "work")
        del entry["cc"], entry["gpu"]
        config = make_farm(tmp_path, {"n": entry}, [standin_job("standin", variants)])
        _, summary = run(config)
    finally:
        node.stop()
    found = rows(tmp_path / "results.db", summary.run_id)
    said = {k: (r["outcome"], r["expected"]) for k, r in found.items()}
    assert said == {("p", card.name): ("pass", "pass"), ("x", card.name): ("missing-refusal", "expected-refusal")}


def test_family_and_arch_specific_ptx_is_no_ptx_jit_for_another_family() -> None:
    """cuobjdump names nvcc 13.0's `compute_100f` PTX `sm_100f.ptx` (its cubin `sm_100.cubin`).
    Family-specific PTX, like arch-specific (`sm_90a`), is compiled by the driver only for its own
    family: on an RTX 5090 (12.0) a build of `-gencode arch=compute_100f,code=compute_100f` has no
    code, which the cell's page called ptx-jit."""
    rtx5090, b300, b200 = (ComputeCapability.parse(c) for c in ("12.0", "10.3", "10.0"))
    assert code_path_for(rtx5090, [], ["sm_100f"]) == "no-code"
    assert code_path_for(b300, [], ["sm_100f"]) == "ptx-jit"
    assert code_path_for(b200, [], ["sm_103f"]) == "no-code"
    assert code_path_for(rtx5090, [], ["sm_100"]) == "ptx-jit"
    assert code_path_for(b300, ["sm_100"], ["sm_100f"]) == "native"


def test_rows_nvidia_smi_may_print_for_cards_never_seen() -> None:
    """Cards of CC 10.0 to 12.1 are read; a CC the farm cannot read ("N/A", "", "9", "9.0.1",
    "10.0a") and a row of too few fields are named as unreadable, never dropped unsaid."""
    from orchestrator.run.driver_check import smi_gpus

    good = [
        "0, GPU-a, NVIDIA B200, 10.0, 580.95.05, 183359 MiB",
        "1, GPU-b, NVIDIA GB300, 10.3, 580.95.05, 284208 MiB",
        "2, GPU-c, NVIDIA Thor, 11.0, 580.95.05, 131072 MiB",
        "3, GPU-d, NVIDIA GeForce RTX 5090, 12.0, 580.95.05, 32607 MiB",
        "4, GPU-e, NVIDIA GB10, 12.1, 580.95.05, [N/A]",
        "5, GPU-f, NVIDIA H20, 9.0, 580.95.05, 97871 MiB",
    ]
    bad = [f"{6 + i}, GPU-x{i}, NVIDIA H800, {cc}, 580.95.05, 81559 MiB" for i, cc in enumerate(BAD_CCS)]
    bad.append("12, GPU-y, NVIDIA H100, 9.0")
    unreadable: list[str] = []
    found = smi_gpus([*good, "WARNING: infoROM is corrupted at gpu 0000:04:00.0", *bad], unreadable)
    assert [(r[0], r[2], str(r[3])) for r in found] == [
        (0, "NVIDIA B200", "10.0"),
        (1, "NVIDIA GB300", "10.3"),
        (2, "NVIDIA Thor", "11.0"),
        (3, "NVIDIA GeForce RTX 5090", "12.0"),
        (4, "NVIDIA GB10", "12.1"),
        (5, "NVIDIA H20", "9.0"),
    ]
    assert unreadable == bad


BAD_CCS = ("N/A", "", "9", "9.0.1", "10.0a", "[N/A]")


def test_two_cards_whose_names_differ_only_in_unicode_get_folders_of_their_own(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A cell's folder on the node is named after its card, by the name's ASCII letters and digits:
    "NVIDIA RTX Ω" (CC 7.5) and "NVIDIA RTX Δ" (CC 9.0) on one node both got `+NVIDIA-RTX`, and
    the two cells of each variant, run side by side on their two GPUs, removed each other's
    files: the 9.0 card's cells, which must pass, were `fail` ("the run never started the
    kernel"), the 7.5 card's a missing-refusal. The folder now carries a digest of the name."""
    cards = [Card("NVIDIA RTX Ω", "7.5"), Card("NVIDIA RTX Δ", "9.0")]
    node = ssh_fleet.add(f"slug-{tmp_path.name[-12:]}", cards)
    prelude = tmp_path / "slow.sh"
    prelude.write_text("sleep 1\n")  # the two cards' runs overlap
    variants = {f"v{i}": standin_variant("PASS", {"exactly": "9.0"}, "EXACT_CC=90", prelude=prelude) for i in range(2)}
    try:
        config = make_farm(tmp_path, {"n": node.farm_entry(tmp_path / "work")}, [standin_job("standin", variants)])
        _, summary = run(config)
    finally:
        node.stop()
    said = {k: (r["outcome"], r["reason"]) for k, r in rows(tmp_path / "results.db", summary.run_id).items()}
    for variant in variants:
        assert said[(variant, "NVIDIA RTX Δ")][0] == "pass", said
        assert said[(variant, "NVIDIA RTX Ω")][0] == "expected-refusal", said


def test_a_pass_on_a_card_the_binary_carries_no_code_for_is_no_pass(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """Built by the real nvcc 13.0 and listed by the real cuobjdump: `compute_90a,code=sm_90a` holds
    machine code for CC 9.0 alone, which a B200 (10.0) cannot load, and the farm says so (code path
    `no-code`). A kernel that printed its pass line there anyway (its launches failed unchecked,
    or it never launched) passed, certified on CC 10.0, its GPU code never run. A pass on a card
    the binary carries no code for is now a fail, saying why; the same binary passes on a GH200
    (9.0: native), `compute_75` PTX passes on an RTX 5090 (12.0: ptx-jit), and `sm_100f` on a GB300
    (10.3: native, the family's cubin)."""
    cuda_bin = bundled_cuda_bin()
    assert cuda_bin is not None
    named = {
        "NVIDIA B200": "10.0",
        "NVIDIA GH200 480GB": "9.0",
        "NVIDIA GeForce RTX 5090": "12.0",
        "NVIDIA GB300": "10.3",
    }
    cards = [Card(name, cc, driver="580.95.05") for name, cc in named.items()]  # a driver nvcc 13.0's code loads on
    node = ssh_fleet.add(f"bw-{tmp_path.name[-12:]}", cards)
    source = (Path(__file__).parent / "standin" / "standin.cpp").read_text()
    source = "#define MODE_PASS\n" + source + "__global__ void touch(int *p) { p[threadIdx.x] += 1; }\n"
    build = "{nvcc} -O1 %s -o {binary} {sources}"
    variants = {
        "sm90a": cuda_variant(build % "-gencode arch=compute_90a,code=sm_90a", {"min": "9.0"}),
        "ptx75": cuda_variant(build % "-arch=compute_75", {"min": "7.5"}),
        "sm100f": cuda_variant(build % "-gencode arch=compute_100f,code=sm_100f", {"min": "10.3", "max": "10.3"}),
    }
    try:
        entry = node.farm_entry(tmp_path / "work", cuobjdump=str(cuda_bin / "cuobjdump"))
        config = make_farm(tmp_path, {"bw": entry}, [cuda_job(variants)])
        (tmp_path / "kernels" / "rt54.cu").write_text(source)
        _, summary = run(config)
    finally:
        node.stop()
    found = rows(tmp_path / "results.db", summary.run_id)
    said = {k: (r["outcome"], r["code_path"], r["reason"]) for k, r in found.items()}
    outcome, path, reason = said[("sm90a", "NVIDIA B200")]
    assert (outcome, path) == ("fail", "no-code"), said
    assert "no code" in reason and "sm_90a" in reason, reason
    assert said[("sm90a", "NVIDIA GH200 480GB")][:2] == ("pass", "native"), said
    assert said[("ptx75", "NVIDIA GeForce RTX 5090")][:2] == ("pass", "ptx-jit"), said
    assert said[("sm100f", "NVIDIA GB300")][:2] == ("pass", "native"), said
    assert said[("sm100f", "NVIDIA B200")][0] == "missing-refusal", said  # the stand-in's gate is MIN_CC 0


def test_ptx_a_newer_toolkit_wrote_on_an_older_driver_fails_no_kernel(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """CUDA's minor version compatibility covers machine code, not PTX: a driver of branch 580
    (CUDA 13.0) cannot compile at load the PTX nvcc 13.5 writes. A `compute_75` build (PTX
    only) of NVIDIA's nvcc 13.5.37 (the farm's own PyPI toolchain) on a T4 with driver 580 failed
    as the kernel's `fail` (the README's cutlass runs on the H200 with 13.5 were such cells); it
    is now infra-error, naming the driver's CUDA and the nvcc. The same binary's `sm_75` machine
    code is not covered by this: its failure stays the kernel's."""
    from orchestrator.run.toolchain import cuobjdump_in, prepare

    tree = prepare("13.5.37", Path.home() / ".cache" / "farm")
    node = ssh_fleet.add(f"r580-{tmp_path.name[-12:]}", Card("Tesla T4", "7.5", driver="580.95.05"))
    variants = {
        "ptx75": cuda_variant("{nvcc} -arch=compute_75 -o {binary} {sources}", MIN75),
        "sm75": cuda_variant("{nvcc} -gencode arch=compute_75,code=sm_75 -o {binary} {sources}", MIN75),
    }
    try:
        entry = node.farm_entry(
            tmp_path / "work", nvcc=f"{tree}/nvidia/cu13/bin/nvcc", cuobjdump=cuobjdump_in(str(tree))
        )
        config = make_farm(tmp_path, {"t4": entry}, [cuda_job(variants)])
        (tmp_path / "kernels" / "rt54.cu").write_text(CUDA_SOURCE)
        _, summary = run(config)
    finally:
        node.stop()
    said = {
        k[0]: (r["outcome"], r["code_path"], r["reason"])
        for k, r in rows(tmp_path / "results.db", summary.run_id).items()
    }
    outcome, path, reason = said["ptx75"]
    assert (outcome, path) == ("infra-error", "ptx-jit"), said
    assert "CUDA 13.0" in reason and "13.5.37" in reason, reason
    assert said["sm75"][:2] == ("fail", "native"), said
