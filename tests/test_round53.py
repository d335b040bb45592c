"""Round 53: kernels a course author adds, read as the README tells them to.

Each test here failed before its fix: a header-derived kernel whose source
includes a header beside it (the farm did not ship it: nvcc's "No such file" on
the node), a job file adding a data file over such a kernel (it replaced the
include), and a kernel put in a subfolder of kernels/ (no hint why it had no job).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli import main
from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError
from orchestrator.outcomes import Outcome
from orchestrator.plan import plan_cells
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store

CHECK_CUH = """\
#pragma once
#include "detail/gate.cuh"
#define CK(x) (x)
"""
GATE_CUH = "#pragma once\nstatic inline int gate() { return 0; }\n"
WARP_REDUCE = """\
// Day 91: a warp-shuffle reduction, with the checks in a shared header.
//
// Build (Turing and newer, needs CC 7.5 to run):
//   nvcc -std=c++17 -O3 -arch=sm_75 -o warp_reduce warp_reduce.cu
#include <cstdio>
#include "common/check.cuh"   // the course's shared checks
#include "missing_on_purpose.cuh"  // not beside it: nvcc's to report, not the farm's to guess
__global__ void reduce(float* x) {
  float v = x[threadIdx.x];
  for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  if (threadIdx.x == 0) *x = v;
}
int main() { return gate(); }
"""


def farm_with(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    (root / "farm.yaml").write_text(f"nodes:\n  local:\n    transport: local\n    workdir: {root / 'node'}\n")
    return root / "farm.yaml"


def includes_farm(root: Path) -> Path:
    return farm_with(
        root,
        {
            "kernels/warp_reduce.cu": WARP_REDUCE.replace('#include "missing_on_purpose.cuh"  //', "//"),
            "kernels/common/check.cuh": CHECK_CUH,
            "kernels/common/detail/gate.cuh": GATE_CUH,
        },
    )


def test_a_derived_kernel_ships_the_headers_it_includes_beside_it(tmp_path):
    farm = load_farm(includes_farm(tmp_path))
    job = farm.jobs["warp_reduce"]
    # the include of the include too: check.cuh's own "detail/gate.cuh", beside check.cuh
    assert job.spec.headers == ["kernels/common/check.cuh", "kernels/common/detail/gate.cuh"]
    assert set(job.files) == {"kernels/warp_reduce.cu", "kernels/common/check.cuh", "kernels/common/detail/gate.cuh"}
    assert job.provenance.fields["headers"] == "kernels/warp_reduce.cu:6 #include; kernels/common/check.cuh:2 #include"


def test_an_include_found_nowhere_beside_the_source_is_left_to_nvcc(tmp_path):
    path = farm_with(tmp_path, {"kernels/warp_reduce.cu": WARP_REDUCE, "kernels/common/check.cuh": "#pragma once\n"})
    assert load_farm(path).jobs["warp_reduce"].spec.headers == ["kernels/common/check.cuh"]


def test_an_include_that_leaves_the_project_or_is_a_link_is_refused_with_its_line(tmp_path):
    (tmp_path / "outside.cuh").write_text("#pragma once\n")
    source = WARP_REDUCE.replace("warp_reduce", "k").replace("common/check.cuh", "../../outside.cuh")
    path = farm_with(tmp_path / "project", {"kernels/k.cu": source})
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    assert "kernels/k.cu" in str(info.value) and "line 6" in str(info.value) and "outside.cuh" in str(info.value)


def test_a_job_file_adding_a_data_file_keeps_the_derived_includes(tmp_path):
    path = includes_farm(tmp_path)
    (tmp_path / "kernels" / "data").mkdir()
    (tmp_path / "kernels" / "data" / "input.txt").write_text("1 2 3\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "warp_reduce.yaml").write_text("headers: [kernels/data/input.txt]\n")
    job = load_farm(path).jobs["warp_reduce"]
    assert job.spec.headers == [
        "kernels/common/check.cuh",
        "kernels/common/detail/gate.cuh",
        "kernels/data/input.txt",
    ]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_derived_kernel_with_a_shared_header_builds_with_the_real_nvcc(tmp_path):
    farm = load_farm(includes_farm(tmp_path))
    store = Store(farm.database_url)
    summary = run_cells(farm, store, plan_cells(farm))
    (row,) = store.results(summary.run_id)
    assert row.outcome == Outcome.COMPILE_ONLY.value, row.build_log


def test_a_job_file_listing_the_included_folder_itself_lists_each_header_once(tmp_path):
    path = includes_farm(tmp_path)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "warp_reduce.yaml").write_text("headers: [kernels/common]\n")
    job = load_farm(path).jobs["warp_reduce"]
    assert job.spec.headers == ["kernels/common"]
    assert set(job.files) == {"kernels/warp_reduce.cu", "kernels/common/check.cuh", "kernels/common/detail/gate.cuh"}


# --------------------------------------------- a kernel in a subfolder of kernels/

SCAN97 = WARP_REDUCE.replace("warp_reduce", "scan97").replace("common/check.cuh", "../common/check.cuh")


def test_a_kernel_in_a_subfolder_of_kernels_gets_the_job_its_header_gives(tmp_path):
    """kernels/day97/scan97.cu was skipped unsaid: `farm jobs scan97` said only "no job for kernel"."""
    path = farm_with(
        tmp_path,
        {
            "kernels/day97/scan97.cu": SCAN97,
            "kernels/common/check.cuh": CHECK_CUH,
            "kernels/common/detail/gate.cuh": GATE_CUH,
            # a helper translation unit with no Build: line is no kernel of its own (a job lists it)
            "kernels/day97/helper.cu": "__device__ int helper() { return 1; }\n",
        },
    )
    out = CliRunner().invoke(main, ["jobs", "scan97", "--config", str(path)])
    assert out.exit_code == 0, out.output
    assert "sources: [kernels/day97/scan97.cu]" in out.output
    assert "headers: [kernels/common/check.cuh, kernels/common/detail/gate.cuh]" in out.output
    assert set(load_farm(path).jobs) == {"scan97"}


def test_a_subfolder_kernel_named_like_another_is_refused_naming_both(tmp_path):
    path = farm_with(
        tmp_path, {"kernels/a/k.cu": SCAN97.replace("scan97", "k"), "kernels/b/k.cu": SCAN97.replace("scan97", "k")}
    )
    for rel in ("kernels/common/check.cuh", "kernels/common/detail/gate.cuh"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(GATE_CUH)
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    assert "kernels/b/k.cu" in str(info.value) and "kernels/a/k.cu" in str(info.value)


# ------------------------------------------- a run that reads a file shipped beside it

HISTO = """\
// Day 96: a histogram of the numbers in data/histo_input.txt.
//
// Build: nvcc -std=c++17 -O3 -arch=sm_75 -o histo histo.cu
// Run:   ./histo data/histo_input.txt
int main() { return 0; }
"""


def test_a_run_naming_a_file_the_job_ships_is_refused_at_load(tmp_path):
    """The run starts in an empty work folder of its own: `./histo data/histo_input.txt`
    loaded, built, and failed on the T4 with "cannot open", read as the kernel's failure."""
    path = farm_with(
        tmp_path,
        {
            "kernels/histo.cu": HISTO,
            "kernels/data/histo_input.txt": "1 2 3 4\n",
            "jobs/histo.yaml": "headers: [kernels/data/histo_input.txt]\n",
        },
    )
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    said = str(info.value)
    assert "jobs/histo.yaml" in said and "variants.sm75.run" in said and "kernels/histo.cu:4 Run" in said
    assert "kernels/data/histo_input.txt" in said and "empty work folder" in said


@pytest.mark.parametrize(
    "run",
    ["cd data && {binary}", "{binary} --input=kernels/data/histo_input.txt", "{binary} 'data/histo_input.txt'"],
)
def test_a_job_files_run_naming_a_shipped_file_or_folder_is_refused(tmp_path, run):
    path = farm_with(
        tmp_path,
        {
            "kernels/histo.cu": HISTO.replace("// Run:   ./histo data/histo_input.txt\n", ""),
            "kernels/data/histo_input.txt": "1 2 3 4\n",
            "jobs/histo.yaml": f'headers: [kernels/data]\nvariants:\n  sm75:\n    run: "{run}"\n',
        },
    )
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    assert "variants.sm75.run" in str(info.value) and "empty work folder" in str(info.value)


def test_a_run_with_plain_arguments_still_loads(tmp_path):
    path = farm_with(tmp_path, {"kernels/histo.cu": HISTO.replace("data/histo_input.txt", "4096 data")})
    assert load_farm(path).jobs["histo"].spec.variants["sm75"].run == "{binary} 4096 data"


@pytest.mark.parametrize("run", ["cp /data/x.bin . && {binary} x.bin", "{binary} kernels", "cd .. && {binary}"])
def test_a_run_naming_the_work_folder_or_the_kernels_folder_is_no_shipped_file(tmp_path, run):
    path = farm_with(
        tmp_path,
        {"kernels/histo.cu": HISTO, "jobs/histo.yaml": f'variants:\n  sm75:\n    run: "{run}"\n'},
    )
    assert load_farm(path).jobs["histo"].spec.variants["sm75"].run == run


# ------------------------------------------- a Run: line that sets a variable first


def test_a_run_line_with_a_variable_before_the_program_keeps_its_arguments(tmp_path):
    """`Run: OMP_NUM_THREADS=2 ./coop_grid 4096` was read as prose: the variant ran `{binary}`, its 4096 lost."""
    source = HISTO.replace("histo", "coop_grid").replace(
        "./coop_grid data/coop_grid_input.txt", "OMP_NUM_THREADS=2 ./coop_grid 4096"
    )
    farm = load_farm(farm_with(tmp_path, {"kernels/coop_grid.cu": source}))
    job = farm.jobs["coop_grid"]
    assert job.spec.variants["sm75"].run == "OMP_NUM_THREADS=2 {binary} 4096"
    assert job.provenance.fields["variants.sm75.run"] == "kernels/coop_grid.cu:4 Run"


def test_a_run_line_setting_the_loaders_variable_is_refused_as_a_job_files_run_is(tmp_path):
    source = HISTO.replace("./histo data/histo_input.txt", "LD_PRELOAD=libx.so ./histo")
    with pytest.raises(ConfigError) as info:
        load_farm(farm_with(tmp_path, {"kernels/histo.cu": source}))
    assert "variants.sm75.run" in str(info.value) and "LD_PRELOAD" in str(info.value)


# ------------------------------- a whole job (rdc: two translation units) missing its header

RDC_MAIN = '#include <cstdio>\n#include "rdc/axpy_dev.cuh"\nint main() { return 0; }\n'
RDC_JOB = """\
kernel: rdc_axpy
sources: [kernels/rdc_axpy.cu, kernels/rdc/axpy_dev.cu]
pass_marker: 'PASS'
refusal_marker: 'needs CC'
variants:
  sm75:
    build: '{nvcc} -rdc=true -arch=sm_75 -o {binary} {sources}'
    cc: {min: "7.5"}
"""


def rdc_farm(root: Path, job: str) -> Path:
    return farm_with(
        root,
        {
            "kernels/rdc_axpy.cu": RDC_MAIN,
            "kernels/rdc/axpy_dev.cuh": "#pragma once\n__device__ float axpy_one(float, float, float);\n",
            "kernels/rdc/axpy_dev.cu": '#include "axpy_dev.cuh"\n__device__ float axpy_one(float a, float x, float y) '
            "{ return a * x + y; }\n",
            "jobs/rdc_axpy.yaml": job,
        },
    )


def test_a_whole_job_that_does_not_ship_a_header_its_source_includes_is_refused_at_load(tmp_path):
    """It built on the node without it: nvcc's "No such file", stored as the kernel's build-fail."""
    with pytest.raises(ConfigError) as info:
        load_farm(rdc_farm(tmp_path, RDC_JOB))
    said = str(info.value)
    assert "jobs/rdc_axpy.yaml" in said and "headers" in said
    assert "kernels/rdc/axpy_dev.cuh" in said and "kernels/rdc_axpy.cu:2" in said
    # both sources include it: said once, where the first does
    assert said.count("found no kernels/rdc/axpy_dev.cuh") == 1, said


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_whole_rdc_job_with_its_header_builds_and_counts_with_the_real_nvcc(tmp_path):
    job = RDC_JOB.replace("variants:", "headers: [kernels/rdc/axpy_dev.cuh]\nvariants:")
    farm = load_farm(rdc_farm(tmp_path, job))
    store = Store(farm.database_url)
    (row,) = store.results(run_cells(farm, store, plan_cells(farm)).run_id)
    assert row.outcome == Outcome.COMPILE_ONLY.value, row.build_log


def test_an_include_too_long_for_the_file_system_is_left_to_nvcc(tmp_path):
    source = WARP_REDUCE.replace("missing_on_purpose.cuh", "x" * 300 + ".cuh")
    path = farm_with(tmp_path, {"kernels/warp_reduce.cu": source, "kernels/common/check.cuh": "#pragma once\n"})
    assert load_farm(path).jobs["warp_reduce"].spec.headers == ["kernels/common/check.cuh"]
