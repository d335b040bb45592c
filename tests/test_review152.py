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
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import yaml
from farm_cli import farm
from test_bisect import commit, farm_in_repo, git
from test_metrics import new_run, result_record
from toyfarm import toy_farm

from orchestrator.cli.verify import verdict_line
from orchestrator.farm_writable import WHY
from orchestrator.outcomes import Outcome
from orchestrator.progress import describe_cell
from orchestrator.run.summary import RunSummary
from orchestrator.store.database import Store

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


# ------------------------------------------------------------------ the words of "certifies nothing"


def _cell_result(outcome: Outcome, *, standin: bool, farm_writable: bool) -> tuple[SimpleNamespace, SimpleNamespace]:
    """A cell as the run's listeners get it (cell, CellResult), its kernel run on a card: the fields they read."""
    result = SimpleNamespace(
        verdict=SimpleNamespace(outcome=outcome, reason="r", failed_stage=None),
        gpu=SimpleNamespace(verified=not standin),
        stages=[],
        expectation=SimpleNamespace(label=outcome.value),
        farm_writable=farm_writable,
    )
    return SimpleNamespace(label="k:v@here"), result


def _last_line(outcome: Outcome, *, standin: bool, farm_writable: bool) -> tuple[str, str]:
    """The cell's own line and `farm verify`'s last line, for one cell of `outcome`."""
    cell, result = _cell_result(outcome, standin=standin, farm_writable=farm_writable)
    summary = RunSummary(run_id=3, results=[(cell, result, 7)])  # type: ignore[list-item]
    summary.outcomes[outcome.value] = 1
    return describe_cell(cell, result, 7), verdict_line(summary)  # type: ignore[arg-type]


def test_a_known_failure_on_a_stand_in_card_is_not_counted_as_certifying_nothing() -> None:
    """The pages flag only pass, expected-refusal and fixed (outcomes.RAN_AS_EXPECTED): the run's lines
    said "1 of them on cards the NVIDIA driver did not confirm: certify nothing" of a known-failure."""
    for standin, farm_writable in ((True, False), (False, True)):
        line, last = _last_line(Outcome.KNOWN_FAILURE, standin=standin, farm_writable=farm_writable)
        assert "certif" not in line and "certify nothing" not in last, (line, last)
    for outcome in (Outcome.PASS, Outcome.EXPECTED_REFUSAL, Outcome.FIXED):  # what the pages flag, said
        line, last = _last_line(outcome, standin=True, farm_writable=True)
        assert "certifies nothing" in line, line
        assert "1 of them on cards" in last and f"1 of them {WHY}: certify nothing" in last, last


def _show(tmp_path: Path, outcome: str) -> str:
    """`farm show` of one result of `outcome` on a stand-in card, run on the farm's own machine."""
    config = toy_farm(tmp_path)
    store = Store(f"sqlite:///{tmp_path}/results.db")
    store.journal = None
    try:
        run_id, snapshot = new_run(store)
        record = replace(result_record(run_id, snapshot, outcome=outcome), real_gpu=False, farm_writable=True)
        result_id = store.add_result(record)
        store.finish_run(run_id, "finished", 0)
    finally:
        store.close()
    done = farm("show", str(result_id), "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_farm_show_says_certifies_nothing_only_where_it_applies(tmp_path: Path) -> None:
    """A fail is no certificate either way (its outcome says so): its card and "ran" lines said
    "certifies nothing" as if a pass were withheld; they still say where it ran and on what card."""
    failed = _show(tmp_path / "fail", "fail")
    card = re.search(r"^card .*$", failed, re.M)
    ran = re.search(r"^ran .*$", failed, re.M)
    assert card and ran, failed
    assert "not confirmed by the NVIDIA driver" in card.group() and WHY in ran.group(), failed
    assert "certifies nothing" not in card.group() + ran.group(), failed
    passed = _show(tmp_path / "pass", "pass")
    assert re.search(rf"^ran +{re.escape(WHY)}: certifies nothing$", passed, re.M), passed
    assert re.search(r"^card .*: certifies nothing$", passed, re.M), passed
