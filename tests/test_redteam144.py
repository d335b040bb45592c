"""Red team 144: `farm bisect` on hostile histories, and the sanitize stage's log read as evidence."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from test_bisect import commit, farm_in_repo, git

KERNEL = """\
// A kernel whose job comes from its header.
//
// Build (Turing and newer):
//   nvcc -arch=sm_75 -o k k.cu
// Run:   ./k
{include}
#include <cstdio>
__global__ void k(float *x) {{ x[threadIdx.x] = SCALE; }}
int main() {{ std::printf("PASS\\n"); return 0; }}
"""


def test_a_header_derived_kernel_is_bisected_with_the_headers_it_includes(tmp_path: Path) -> None:
    """A kernel whose job comes from its header ships the headers it includes from beside it.
    Bisect wrote the .cu alone out of git: from the commit that moved code into an included
    header on, every commit failed to build ("No such file"), so that commit, whose kernel
    builds, was named the first bad one (exit 0), and the header's own breaking edit was
    never a candidate."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    farm = {"jobs": "jobs", "kernels": "kernels", "nodes": {"here": {"transport": "local", "workdir": "work"}}}
    good = commit(
        root,
        "k: inline",
        {
            "farm.yaml": yaml.safe_dump(farm),
            "jobs/README": "jobs\n",
            "kernels/k.cu": KERNEL.format(include="#define SCALE 2.0f"),
        },
    )
    moved = commit(
        root,
        "k: the scale in a header",
        {"kernels/k.cu": KERNEL.format(include='#include "scale.cuh"'), "kernels/scale.cuh": "#define SCALE 2.0f\n"},
    )
    broke = commit(root, "scale: a typo", {"kernels/scale.cuh": "#define SCALE 2.0f +\n"})
    done = farm_in_repo("bisect", "k", "--node", "here", "--good", good, "--bad", "HEAD", cwd=root)
    assert f"first bad commit: {moved}" not in done.stdout, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"first bad commit: {broke} (" in done.stdout, done.stdout
    assert re.search(rf"^\S.*{moved[:12]} good", done.stdout, re.M), done.stdout
