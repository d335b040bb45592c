"""Red-team round 140: a careless kernel author's job files and inputs the farm had not met.

Broke (before/after):
- A job file in a subfolder of the jobs folder (`jobs/day97/scan97.yaml`, mirroring the
  course's `kernels/day97/scan97.cu`, which the farm does read) was skipped without a word: the
  header's job ran in its place, without the author's requirements (its `instructions:`, its
  timeout), and its pass certified a job the author never wrote; a whole job there (with
  `sources`) was a kernel missing from the matrix, unsaid. With `jobs: kernels` the natural place,
  beside the kernel (`kernels/day97/scan97.yaml`), was skipped the same way. Such a file is now
  refused at load, naming it and the place the farm reads (round 79 refused `saxpy.YAML` so).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError

HEADER_KERNEL = "// Build: nvcc -O3 -arch=sm_75 -o scan97 scan97.cu\nint main() { return 0; }\n"
# what the header cannot say: the SASS the pass must show, and a tighter timeout
OVERRIDE = "timeout: 5\nvariants:\n  sm75:\n    instructions: {SHFL: 1}\n"
WHOLE = (
    "kernel: gemm\nsources: [kernels/gemm/gemm.cu]\npass_marker: 'gemm: PASS'\nrefusal_marker: 'needs CC'\n"
    "variants:\n  v1:\n    build: '{nvcc} -arch=sm_75 -o {binary} {sources}'\n    cc: {min: '7.5'}\n"
)
LOCAL = "nodes:\n  local:\n    transport: local\n"


def _project(root: Path, jobs_key: str, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "farm.yaml").write_text(jobs_key + LOCAL)
    return root / "farm.yaml"


@pytest.mark.parametrize(
    ("jobs_key", "job_file", "text", "place"),
    [
        ("", "jobs/day97/scan97.yaml", OVERRIDE, "jobs/scan97.yaml"),
        ("jobs: kernels\n", "kernels/day97/scan97.yaml", OVERRIDE, "kernels/scan97.yaml"),
        ("", "jobs/gemm/gemm.yml", WHOLE, "jobs/gemm.yaml"),
    ],
)
def test_a_job_file_in_a_subfolder_of_the_jobs_folder_is_refused_not_skipped(
    tmp_path: Path, jobs_key: str, job_file: str, text: str, place: str
) -> None:
    config = _project(
        tmp_path,
        jobs_key,
        {
            "kernels/day97/scan97.cu": HEADER_KERNEL,
            "kernels/gemm/gemm.cu": "int main() { return 0; }\n",
            "jobs/other.yaml": WHOLE.replace("gemm", "other").replace("kernels/other/other.cu", "kernels/day97/x.cu"),
            "kernels/day97/x.cu": "int main() { return 0; }\n",
            job_file: text,
        },
    )
    with pytest.raises(ConfigError) as info:
        load_farm(config, check_dependencies=False)
    said = str(info.value)
    assert str(tmp_path / job_file) in said and "a job file in a subfolder" in said, said
    assert place in said, said


def test_hidden_folders_in_the_jobs_folder_are_not_entered(tmp_path: Path) -> None:
    """Guard of the fix: with `jobs: kernels`, a CI's `.github/workflows/ci.yml` under the kernels
    is no job file the farm skipped (hidden folders are not entered, as for kernels/)."""
    config = _project(
        tmp_path,
        "jobs: kernels\n",
        {
            "kernels/gemm.yaml": WHOLE,
            "kernels/gemm/gemm.cu": "int main() { return 0; }\n",
            "kernels/.github/workflows/ci.yml": "on: push\n",
        },
    )
    assert sorted(load_farm(config, check_dependencies=False).jobs) == ["gemm"]
