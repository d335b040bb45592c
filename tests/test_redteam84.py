"""Red-team round 84: input and output the farm had not met.

1. A NUL in a variant's `build` or `inspect` (a YAML "\\0" escape) loaded: each cell was then
   infra-error "the stage's shell on the node ended ... killed, by the kernel or the node"
   (Python's "embedded null byte" under the node runner), exit 4, the node blamed for the job
   file's typo, and the build command stored with the NUL turned into U+FFFD.
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
