"""Red team 144: `farm bisect` on hostile histories, and the sanitize stage's log read as evidence."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from nodes import CARDS, Fleet, install_sanitizer, query, standin_job, standin_variant
from test_bisect import commit, farm_in_repo, git
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.plan import plan_cells
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store

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


# ------------------------------------------------------------------ the sanitize stage

# under the tool: its log emptied (the real tool's banner gone), then the tool itself killed
HIDE_AND_KILL = """\
[ -n "$STANDIN_SANITIZER_TOOL" ] || exit 0
: > "../sanitize-$STANDIN_SANITIZER_TOOL.log"
p=$$
while [ "$p" -gt 1 ]; do
    p=$(awk '{print $4}' /proc/$p/stat)
    if tr '\\0' ' ' < /proc/$p/cmdline | grep -q compute-sanitizer; then kill -9 "$p"; break; fi
done
"""


@pytest.fixture(scope="module")
def san_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    nodes = Fleet(tmp_path_factory.mktemp("rt144-fleet"))
    try:
        install_sanitizer(nodes.add("t4san", CARDS["t4"], start=False))
        nodes["t4san"].start()
        yield nodes
    finally:
        nodes.stop()


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_kernel_that_wipes_its_log_and_kills_the_tool_does_not_blame_the_node(
    san_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """The log is the one file outside its work folder a kernel under the tool may write. A
    kernel with a stray write that emptied it and killed its tool left no banner, which read
    as a tool that never started: infra-error, the node's fault and no verdict on the kernel
    (a certificate stood unflagged). A tool killed by a signal did not finish its check."""
    prelude = tmp_path / "prelude.sh"
    prelude.write_text(HIDE_AND_KILL)
    variants = {"oob": standin_variant("OOB", {"min": "7.5"}, "MIN_CC=75", prelude=prelude, sanitize=["memcheck"])}
    nodes = {"t4san": san_fleet["t4san"].farm_entry(tmp_path / "work", build_jobs=1, runner=runner)}
    farm = load_farm(make_farm(tmp_path, nodes, [standin_job("standin", variants)]))
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives")
    finally:
        store.close()
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    assert (row["outcome"], row["failed_stage"]) == ("sanitizer-error", "sanitize"), row["reason"]
    assert "did not finish" in row["reason"], row["reason"]


def test_a_commit_without_the_cell_bad_at_the_bad_end_is_untestable_not_the_nodes_failure(tmp_path: Path) -> None:
    """`farm bisect KERNEL` judges each commit on the cells bad at --bad. A commit where that
    variant went by another name ran none of them: "no cell ran", read as an infra-error, so the
    walk stopped there with exit 4, "the node failed", on a node that had run every cell."""
    root = tmp_path / "toy"
    toy_farm(root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "farm.yaml", "jobs", "kernels")
    git(root, "commit", "-q", "-m", "toy")
    good = git(root, "rev-parse", "HEAD")
    job = (root / "jobs" / "toy.yaml").read_text()
    renamed = commit(root, "toy: plain is called flat", {"jobs/toy.yaml": job.replace("  plain:", "  flat:")})
    commit(root, "toy: plain again", {"jobs/toy.yaml": job})
    broke = commit(root, "toy: broken", {"kernels/toy.cpp": "int main( {"})
    done = farm_in_repo("bisect", "toy", "--node", "here", "--good", good, "--bad", "HEAD", cwd=root)
    assert re.search(rf"^step\s+{renamed[:12]} untestable: ", done.stdout, re.M), done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"first bad commit: {broke} (" in done.stdout, done.stdout
    # from the renamed commit: --good has none of those cells, nothing is backed, no page of no cell
    done = farm_in_repo("bisect", "toy", "--node", "here", "--good", renamed, "--bad", "HEAD", cwd=root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "first bad commit: " not in done.stdout and f"--good {renamed[:12]} cannot be judged" in done.stdout
    assert "cells/None.html" not in done.stdout, done.stdout
