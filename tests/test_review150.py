"""Review 150: a kernel author new to the farm adds two kernels (a job file's and a header's) and
makes a newcomer's mistakes. Where the error did not say what to write, it does now."""

from __future__ import annotations

from pathlib import Path

from test_config import GOOD_JOB, load_error, make_farm


def test_sources_written_as_one_path_not_a_list_says_to_bracket_it_and_nothing_else(tmp_path: Path) -> None:
    # it led with "kernels/k.cu: found a kernel no job file lists", a consequence, and then
    # "expected a valid list", which did not say how to write one
    job = GOOD_JOB.replace("sources: [kernels/k.cu]", "sources: kernels/k.cu")
    text = str(load_error(make_farm(tmp_path, job=job)))
    assert "no job file lists" not in text
    assert "k.yaml: sources: found 'kernels/k.cu' (str)" in text
    assert "a list: write it in brackets, sources: [kernels/k.cu]" in text
