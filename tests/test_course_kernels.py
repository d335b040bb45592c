"""The course's real kernels, built by the real nvcc and inspected by the real
cuobjdump, through the local node, exactly as `farm verify --all` does.

On a machine without a GPU (CI) every cell is compile-only or the declared
known failure; these tests never skip. Tests marked `gpu` need a real NVIDIA
GPU and run on the lent Hopper machine: `scripts/test -m gpu`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.config.farm import load_farm
from orchestrator.outcomes import Outcome
from orchestrator.plan import plan_cells
from orchestrator.run import machine_code
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store

REPO = Path(__file__).resolve().parents[1]


def real_gpu_cc() -> str | None:
    """The first GPU's compute capability, from the real nvidia-smi, or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


GPU_CC = real_gpu_cc()
needs_gpu = pytest.mark.skipif(GPU_CC is None, reason="needs a real NVIDIA GPU (nvidia-smi)")


def local_farm(tmp_path: Path) -> Path:
    """The repository's own jobs and kernels, with only the local node, and a
    fresh work folder so nvcc really runs."""
    shutil.copytree(REPO / "jobs", tmp_path / "jobs")
    shutil.copytree(REPO / "kernels", tmp_path / "kernels")
    path = tmp_path / "farm.yaml"
    path.write_text(
        f"database: sqlite:///results.db\nnodes:\n  local:\n    transport: local\n    workdir: {tmp_path / 'node'}\n"
    )
    return path


@pytest.fixture(scope="module")
def course_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("course")
    farm = load_farm(local_farm(tmp_path))
    store = Store(farm.database_url)
    summary = run_cells(farm, store, plan_cells(farm))
    rows = {(r.kernel, r.variant): r for r in store.results(summary.run_id)}
    snapshot = store.snapshots(summary.run_id)[0]
    return summary, rows, snapshot, farm


def test_kernels_are_byte_exact_course_sources():
    for name in ("wgmma_gemm.cu", "cutlass_gemm.cu"):
        shared = REPO.parent / "shared" / "kernels" / name
        if shared.exists():
            assert (REPO / "kernels" / name).read_bytes() == shared.read_bytes()
    # the certificate is about these bytes: the header's claim must still be there
    assert b"UNVERIFIED: not yet run on real hardware" in (REPO / "kernels" / "wgmma_gemm.cu").read_bytes()


def test_every_variant_of_every_kernel_is_planned(course_run):
    _, rows, _, _ = course_run
    assert set(rows) == {
        ("wgmma_gemm", "documented"),
        ("wgmma_gemm", "gencode"),
        ("cutlass_gemm", "sm75"),
        ("cutlass_gemm", "sm80"),
    }


def test_documented_wgmma_build_fails_as_declared(course_run):
    _, rows, snapshot, _ = course_run
    row = rows[("wgmma_gemm", "documented")]
    assert snapshot.nvcc_version.startswith("13.0")
    assert row.outcome == Outcome.KNOWN_FAILURE
    assert row.failed_stage == "build"
    assert "-arch=sm_90a" in row.build_command
    log = row.build_log.decode()
    assert "not supported on .target 'sm_90'" in log
    assert "wgmma" in log
    assert "compute_90" in row.known_failure_reason


def test_gencode_wgmma_has_hgmma_and_only_sm90a_code(course_run):
    _, rows, _, _ = course_run
    row = rows[("wgmma_gemm", "gencode")]
    assert row.instruction_counts["HGMMA"] == 4
    assert row.elf_targets == ["sm_90a"]
    assert row.ptx_targets == []
    assert len(row.binary_sha256) == 64
    expected = (
        Outcome.COMPILE_ONLY if GPU_CC is None else (Outcome.PASS if GPU_CC == "9.0" else Outcome.EXPECTED_REFUSAL)
    )
    assert row.outcome == expected


def test_cutlass_builds_carry_their_tensor_core_instructions(course_run):
    _, rows, _, _ = course_run
    sm75, sm80 = rows[("cutlass_gemm", "sm75")], rows[("cutlass_gemm", "sm80")]
    assert sm75.instruction_counts == {"HMMA": 128}
    assert sm80.instruction_counts == {"HMMA": 64, "LDGSTS": 24}
    assert sm75.elf_targets == ["sm_75"] and sm75.ptx_targets == ["sm_75"]
    assert sm80.elf_targets == ["sm_80"] and sm80.ptx_targets == ["sm_80"]
    assert "-DDAY84_SM80" in sm80.build_command and "cutlass" in sm80.build_command


def test_results_record_the_sources_sha256(course_run):
    _, rows, _, _ = course_run
    for (kernel, _), row in rows.items():
        digest = hashlib.sha256((REPO / "kernels" / f"{kernel}.cu").read_bytes()).hexdigest()
        assert row.source_sha256 == digest
        assert row.sources == {f"kernels/{kernel}.cu": digest}


def test_no_gpu_run_is_green(course_run):
    summary, rows, snapshot, _ = course_run
    if GPU_CC is not None:
        pytest.skip("this machine has a GPU; see the gpu-marked tests")  # never in CI
    assert snapshot.gpu_name is None
    assert summary.exit_code == 0
    assert {r.outcome for r in rows.values()} == {"compile-only", "known-failure"}


def test_warm_rerun_reuses_builds_and_ships_nothing(course_run):
    _, _, _, farm = course_run
    store = Store(farm.database_url)
    summary = run_cells(farm, store, plan_cells(farm))
    assert summary.bytes_shipped == 0
    rows = {(r.kernel, r.variant): r for r in store.results(summary.run_id)}
    for key in [("wgmma_gemm", "gencode"), ("cutlass_gemm", "sm75"), ("cutlass_gemm", "sm80")]:
        assert rows[key].build_cached, key
        assert rows[key].stage_details["build"]["status"] == "cached"
    # a failed build is never cached: it is tried (and fails) again
    assert not rows[("wgmma_gemm", "documented")].build_cached


# ------------------------------------------------------------ real GPU only


@pytest.mark.gpu
@needs_gpu
def test_gpu_every_cell_as_expected(course_run):
    summary, rows, snapshot, _ = course_run
    assert snapshot.cc == GPU_CC
    for row in rows.values():
        print(
            f"{row.kernel}:{row.variant} -> {row.outcome} ({row.reason}); "
            f"code path {row.code_path}; stdout {row.stdout.decode(errors='replace').strip()!r}"
        )
    assert summary.exit_code == 0, {k: r.outcome for k, r in rows.items()}
    assert all(r.outcome != "compile-only" for r in rows.values())


@pytest.mark.gpu
@needs_gpu
def test_gpu_hopper_wgmma_passes_natively(course_run):
    if GPU_CC != "9.0":
        pytest.skip(f"needs CC 9.0, this GPU is {GPU_CC}")
    _, rows, _, _ = course_run
    row = rows[("wgmma_gemm", "gencode")]
    assert row.outcome == "pass"
    assert row.code_path == "native"
    assert b"PASS" in row.stdout
    for variant in ("sm75", "sm80"):
        cutlass = rows[("cutlass_gemm", variant)]
        assert cutlass.outcome == "pass", cutlass.reason
        assert cutlass.code_path == "ptx-jit"  # no CC 9.0 machine code in either build
        # its HMMA (and sm80's LDGSTS) counted in the node nvcc's compile of its PTX for sm_90, not in
        # the sm_75 / sm_80 cubins the H200 never loads (round 58; run/node/jit.py)
        detail = (cutlass.stage_details or {}).get("inspect", {}).get("detail") or ""
        assert f"{machine_code.JIT_COUNTED} of that PTX for sm_90" in detail, detail
        print(f"cutlass {variant} on the H200: {cutlass.instruction_counts}; {detail[:300]}")


@pytest.mark.gpu
@needs_gpu
def test_gpu_every_card_is_confirmed_and_each_result_names_its_card(course_run):
    """Issue 9, cases 3 and 9: the probe lists every GPU and the driver (NVML)
    confirms each; each cell ran on one card, by UUID, and says which; with
    several cards, the runs went to more than one of them."""
    _, rows, snapshot, _ = course_run
    gpus = snapshot.gpus
    print(f"cards: {gpus}")
    assert gpus and all(g["verified"] for g in gpus), gpus
    uuids = {g["uuid"]: g["index"] for g in gpus}
    ran = [r for r in rows.values() if r.exit_code is not None]
    for row in ran:
        assert row.gpu_uuid in uuids and row.gpu_index == uuids[row.gpu_uuid], row.gpu_uuid
        assert row.real_gpu and row.cc == GPU_CC and row.identity
        print(f"{row.kernel}:{row.variant} ran on GPU {row.gpu_index} {row.gpu_uuid}")
    if len(gpus) > 1:
        assert len({r.gpu_uuid for r in ran}) > 1, "several cards, but every run went to one"


@pytest.mark.gpu
@needs_gpu
def test_gpu_the_runner_starts_the_kernel_of_a_run_that_starts_other_programs(tmp_path):
    """The wgmma kernel with a run that starts another program first (`cd . && nice -n 0
    {binary} && {binary}`): the node's runner starts each kernel command itself, at its
    trampoline's request (noderunner.KernelFiles), confined in a Landlock domain of its own, on
    the GPU the farm pinned. On the H200 it passes as the plain run does."""
    if GPU_CC != "9.0":
        pytest.skip(f"needs CC 9.0, this GPU is {GPU_CC}")
    config = local_farm(tmp_path)
    job = tmp_path / "jobs" / "wgmma_gemm.yaml"
    job.write_text(job.read_text() + "    run: cd . && nice -n 0 {binary} && {binary}\n")  # the gencode variant's
    farm = load_farm(config)
    store = Store(farm.database_url)
    summary = run_cells(farm, store, plan_cells(farm, ["wgmma_gemm:gencode"]))
    (row,) = store.results(summary.run_id)
    detail = row.stage_details["run"]["detail"]
    print(f"cell: {row.outcome} ({row.reason}); run: {detail}; stdout {row.stdout.decode(errors='replace')!r}")
    assert row.outcome == "pass", row.reason
    assert row.stdout.count(b": PASS") == 2 and "started the kernel 2 times (exits 0, 0)" in detail, detail


@pytest.mark.gpu
@needs_gpu
def test_gpu_a_stand_in_nvidia_smi_on_real_hardware_is_not_believed(tmp_path):
    """Issue 9, case 9: on a real GPU machine, an nvidia-smi on PATH that
    reports a Tesla T4 is contradicted by the driver (NVML): nothing it runs certifies."""
    import os
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from nodes import CARDS, nvidia_smi_script

    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(nvidia_smi_script(CARDS["t4"]))
    (fake / "nvidia-smi").chmod(0o755)
    config = local_farm(tmp_path)
    text = config.read_text() + f"    env: {{PATH: '{fake}:{os.environ['PATH']}'}}\n"
    config.write_text(text)
    farm = load_farm(config)
    store = Store(farm.database_url)
    summary = run_cells(farm, store, plan_cells(farm, ["wgmma_gemm:gencode"]))
    snapshot = store.snapshots(summary.run_id)[0]
    (row,) = store.results(summary.run_id)
    print(f"probe: {snapshot.gpus}; driver check: {snapshot.driver_check}")
    print(f"cell: {row.outcome} ({row.reason}); real_gpu {row.real_gpu}")
    assert snapshot.gpu_name == "Tesla T4" and not snapshot.real_gpu
    assert "not confirmed" in snapshot.driver_check and "the driver (NVML)" in snapshot.driver_check
    assert not row.real_gpu and row.cc == "7.5"


FORGERY = r"""
#include <cstdio>
// named as the instruction its job requires: its `Function : HGMMA` line is no HGMMA
extern "C" __global__ void HGMMA(float *x) { if (x) x[threadIdx.x] = 1.0f; }
int main() { HGMMA<<<1, 1>>>(nullptr); cudaDeviceSynchronize(); std::printf("fake: PASS\n"); return 0; }
"""


def test_names_are_not_machine_code_a_kernel_named_hgmma_nor_a_variant_named_like_a_cubin(tmp_path: Path) -> None:
    """Found by a red-team helper, with the real nvcc and cuobjdump: an `extern "C"` kernel
    named HGMMA met `instructions: {HGMMA: 1}` (the farm counted its name in the SASS), and a
    variant named `sm_90.cubin.x` added a false sm_90 cubin to an sm_80-only binary (the
    binary's name is in cuobjdump's listing), so a CC 9.0 card would have run it `native`."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "kernels" / "fake.cu").write_text(FORGERY)
    (tmp_path / "jobs" / "fake.yaml").write_text(
        "kernel: fake\nsources: [kernels/fake.cu]\npass_marker: 'fake: PASS'\nrefusal_marker: 'needs CC'\n"
        "variants:\n"
        "  sm90a:\n"
        "    build: '{nvcc} -O3 -gencode arch=compute_90a,code=sm_90a -o {binary} {sources}'\n"
        "    cc: {exactly: '9.0'}\n"
        "    instructions: {HGMMA: 1}\n"
        "  sm_90.cubin.x:\n"
        "    build: '{nvcc} -O3 -arch=sm_80 -o {binary} {sources}'\n"
        "    cc: {min: '8.0'}\n"
    )
    config = tmp_path / "farm.yaml"
    config.write_text(
        f"database: sqlite:///results.db\nnodes:\n  local:\n    transport: local\n    workdir: {tmp_path / 'node'}\n"
    )
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm))
        rows = {r.variant: r for r in store.results(summary.run_id)}
    finally:
        store.close()
    named = rows["sm90a"]
    assert (named.outcome, named.failed_stage) == ("inspect-fail", "inspect"), named.reason
    assert named.instruction_counts == {"HGMMA": 0}
    assert "HGMMA" in named.reason
    listed = rows["sm_90.cubin.x"]
    assert listed.outcome == "compile-only", listed.reason
    assert (listed.elf_targets, listed.ptx_targets) == (["sm_80"], ["sm_80"])
