"""Red-team round 84: input and output the farm had not met.

1. A NUL in a variant's `build` or `inspect` (a YAML "\\0" escape) loaded: each cell was then
   infra-error "the stage's shell on the node ended ... killed, by the kernel or the node"
   (Python's "embedded null byte" under the node runner), exit 4, the node blamed for the job
   file's typo, and the build command stored with the NUL turned into U+FFFD.
2. Two kernels whose names differ only in case (jobs/Gemm.yaml, jobs/gemm.yaml) loaded, and their
   certification pages, kernels/Gemm.html and kernels/gemm.html, are one file on the disks the
   reviewers open the site from (macOS, a Windows share): the later overwrote the earlier, both
   rows linking to it, a failing kernel's row opening the other one's VERIFIED page. Node pages
   sharing a file were refused at load since round 65; kernel pages were not.
3. `timeout: 1e3` (or farm.yaml's `output_cap: 1e6`) was refused as "found '1e3' (str); expected a
   valid number": YAML 1.1 reads a number whose mantissa has no '.' as text, and the error said
   the number written was not one, without saying how to write it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_config import GOOD_JOB, load_error, make_farm

# ------------------------------------------------------------ 1. a NUL in a command template


@pytest.mark.parametrize(
    ("key", "line"),
    [
        ("build", '    build: "{nvcc} -o {binary} {sources}\\0 -lnosuchlib"\n'),
        ("inspect", '    inspect: "{cuobjdump} --dump-sass {binary}\\0"\n'),
    ],
)
def test_a_nul_in_a_command_template_is_the_job_files_error(tmp_path: Path, key: str, line: str) -> None:
    job = GOOD_JOB.replace("    build: '{nvcc} -o {binary} {sources}'\n", "") + line
    if key != "build":
        job += "    build: '{nvcc} -o {binary} {sources}'\n"
    error = str(load_error(make_farm(tmp_path, job=job)))
    assert "k.yaml" in error and f"variants.v1.{key}" in error, error
    assert "NUL" in error, error


# ------------------------------------------------------------ 2. kernel pages that are one file


def test_kernels_whose_pages_are_one_file_on_a_case_insensitive_disk_are_refused(tmp_path: Path) -> None:
    upper = GOOD_JOB.replace("kernel: k", "kernel: K").replace("k.cu", "K.cu")
    config = make_farm(tmp_path, job=upper, job_name="K.yaml")
    (tmp_path / "kernels" / "K.cu").write_text("int main() { return 1; }\n")
    (tmp_path / "jobs" / "k.yaml").write_text(GOOD_JOB)
    error = str(load_error(config))
    assert "k.yaml" in error and "kernel" in error, error
    assert "kernels/K.html" in error or "kernels/k.html" in error, error


# ------------------------------------------------------------ 3. a number in e-notation YAML reads as text


@pytest.mark.parametrize(("line", "key"), [("timeout: 1e3\n", "timeout"), ("build_timeout: 9E+2\n", "build_timeout")])
def test_a_number_yaml_reads_as_text_says_how_to_write_it(tmp_path: Path, line: str, key: str) -> None:
    error = str(load_error(make_farm(tmp_path, job=GOOD_JOB + line)))
    assert "k.yaml" in error and f"{key}:" in error, error
    assert "YAML reads as text" in error and ("1000" in error or "900" in error), error
