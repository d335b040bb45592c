"""Review 152: small leftovers of earlier reviews.

- `farm bisect` built a commit whose kernel or included header is a Git LFS pointer file (the
  clone has the pointer, not the content) as if it were source: its build failed and it could be
  named the first bad commit. Such a commit is untestable, skipped with the reason.
- `farm bisect` looked for a header-derived kernel at kernels/KERNEL.cu alone: one in a subfolder
  (kernels/day97/scan97.cu, which the farm's loader reads) exited 3 "no job".
- The run's lines ("N of them on stand-in cards: certify nothing") counted every as-expected cell on
  a stand-in card, compile-only and known-failure too, which the pages do not flag (their rule:
  outcomes.RAN_AS_EXPECTED); `farm show` said "certifies nothing" of a fail too.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from test_bisect import commit, farm_in_repo, git

KERNEL = """\
// A kernel whose job comes from its header.
//
// Build (Turing and newer):
//   nvcc -arch=sm_75 -o {name} {name}.cu
// Run:   ./{name}
#include "scale.cuh"
#include <cstdio>
__global__ void k(float *x) {{ x[threadIdx.x] = SCALE; }}
int main() {{ std::printf("PASS\\n"); return 0; }}
"""

LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    "size 21\n"
)


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    return root


def _farm_yaml() -> str:
    return yaml.safe_dump({"jobs": "jobs", "kernels": "kernels", "nodes": {"here": {"transport": "local"}}})


def test_a_commit_whose_header_is_an_lfs_pointer_is_untestable_not_the_first_bad(tmp_path: Path) -> None:
    """The header became a Git LFS pointer (its content not in this clone) at one commit and a real
    but broken header at the next: the pointer commit failed to build and was named (exit 0)."""
    root = _repo(tmp_path)
    good = commit(
        root,
        "k: good",
        {
            "farm.yaml": _farm_yaml(),
            "jobs/README": "jobs\n",
            "kernels/k.cu": KERNEL.format(name="k"),
            "kernels/scale.cuh": "#define SCALE 2.0f\n",
        },
    )
    pointer = commit(root, "scale: into LFS", {"kernels/scale.cuh": LFS_POINTER})
    commit(root, "scale: out of LFS, a typo", {"kernels/scale.cuh": "#define SCALE 2.0f +\n"})
    done = farm_in_repo("bisect", "k", "--node", "here", "--good", good, "--bad", "HEAD", cwd=root)
    assert f"first bad commit: {pointer}" not in done.stdout, done.stdout
    said = rf"^step\s+{pointer[:12]} untestable: kernels/scale.cuh is a Git LFS pointer"
    assert re.search(said, done.stdout, re.M), done.stdout
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{pointer[:12]} cannot be tested" in done.stdout, done.stdout


def test_a_kernel_in_a_subfolder_is_bisected(tmp_path: Path) -> None:
    """kernels/day97/scan97.cu (a Build line: the loader reads it) exited 3, bisect seeing no job."""
    root = _repo(tmp_path)
    good = commit(
        root,
        "scan97: good",
        {
            "farm.yaml": _farm_yaml(),
            "jobs/README": "jobs\n",
            "kernels/day97/scan97.cu": KERNEL.format(name="scan97"),
            "kernels/day97/scale.cuh": "#define SCALE 2.0f\n",
        },
    )
    commit(root, "notes", {"NOTES.md": "notes\n"})
    broke = commit(root, "scale: a typo", {"kernels/day97/scale.cuh": "#define SCALE 2.0f +\n"})
    done = farm_in_repo("bisect", "scan97", "--node", "here", "--good", good, "--bad", "HEAD", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"first bad commit: {broke} (" in done.stdout, done.stdout
    assert "kernels/day97/scan97.cu" in done.stdout, done.stdout  # among the inputs it watched
