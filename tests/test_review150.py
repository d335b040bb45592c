"""Review 150: a kernel author new to the farm adds two kernels (a job file's and a header's) and
makes a newcomer's mistakes. Where the error did not say what to write, it does now."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_config import GOOD_JOB, load_error, make_farm


def test_sources_written_as_one_path_not_a_list_says_to_bracket_it_and_nothing_else(tmp_path: Path) -> None:
    # it led with "kernels/k.cu: found a kernel no job file lists", a consequence, and then
    # "expected a valid list", which did not say how to write one
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", "sources: kernels/k.cu")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "no job file lists" not in text
    assert "k.yaml: sources: found 'kernels/k.cu' (str)" in text
    assert "a list: write it in brackets, sources: [kernels/k.cu]" in text


def test_a_missing_required_key_says_what_it_holds_with_an_example(tmp_path: Path) -> None:
    # "variants.v1.build: found nothing; expected this key to be set" did not say what to write
    job = GOOD_JOB.replace("    build: '{nvcc} -o {binary} {sources}'\n", "").replace("refusal_marker: needs CC\n", "")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "variants.v1.build: found nothing; expected the variant's build command" in text
    assert "e.g. build: '{nvcc} -O3 -arch=sm_80 -o {binary} {sources}'" in text
    assert "refusal_marker: found nothing; expected the regex of the gate's refusal on stderr" in text


def test_a_typo_of_a_required_key_is_one_error_with_its_did_you_mean(tmp_path: Path) -> None:
    # it was two: "pass_marker: found nothing" first, then the typo's did-you-mean
    text = str(load_error(make_farm(tmp_path, job=GOOD_JOB.replace("pass_marker:", "pass_makrer:"))))
    assert "Did you mean 'pass_marker'?" in text
    assert "pass_marker: found nothing" not in text


@pytest.mark.parametrize("written", ["Buld", "build", "BUILD"])
def test_a_misspelt_build_line_is_named_by_its_line(tmp_path: Path, written: str) -> None:
    # "found a header with no Build: line" sent the author looking for a line they had written
    farm = make_farm(tmp_path, job=None)
    (tmp_path / "kernels" / "k.cu").write_text(
        f"// k: a kernel.\n//\n// {written} (needs CC 8.0 to run):\n//   nvcc -arch=sm_80 -o k k.cu\nint main() {{}}\n"
    )
    text = str(load_error(farm))
    assert "found a header with no Build: line" in text
    assert f"line 3 reads '{written} (needs CC 8.0 to run):': did you mean 'Build'? (spelt so, then ':')" in text


def test_a_missing_header_is_not_taken_for_the_job_s_own_source(tmp_path: Path) -> None:
    # `headers: [kernels/k.cuh]`, the header not written yet: "did you mean 'kernels/k.cu'?", the
    # job's own source, which listed again would be refused as listed twice
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", "sources: [kernels/k.cu]\nheaders: [kernels/k.cuh]")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "headers[0]: found 'kernels/k.cuh', which does not exist" in text
    assert "did you mean" not in text
    (tmp_path / "kernels" / "k_util.cuh").write_text("#pragma once\n")
    text = str(load_error(make_farm(tmp_path, job=job.replace("k.cuh", "k_utl.cuh"))))
    assert "(did you mean 'kernels/k_util.cuh'?)" in text
