"""`farm bisect` on real git histories, run through the `farm` command.

The main history is a farm whose kernel `saxpy` (g++-built, run on the sshd
test node `t4` with its stand-in Tesla T4, so it must pass) is as expected at
the tag v1, with seven commits after it:

    c1  NOTES.md                       unrelated
    c2  jobs/saxpy.yaml (timeout)      an input; same build key as v1: its build is reused
    c3  bench/run.sh                   unrelated
    c4  kernels/saxpy.h (SAXPY_A)      the planted regression: wrong numbers, exit 1
    c5  NOTES.md                       unrelated
    c6  kernels/saxpy.cpp (a comment)  an input, still failing
    c7  NOTES.md                       unrelated; HEAD

farm.yaml as committed names a placeholder host for t4: the node comes from
the working tree's farm.yaml (uncommitted), as it is now.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from farm_cli import farm
from nodes import Fleet, query
from toyfarm import toy_farm

from orchestrator.store.database import Store

SAXPY = """\
#include <cstdio>
#include "saxpy.h"
int main() {
    float x[4] = {1, 2, 3, 4}, y[4] = {1, 1, 1, 1};
    float worst = 0;
    for (int i = 0; i < 4; i++) {
        float got = SAXPY_A * x[i] + y[i], want = 2.0f * x[i] + 1.0f;
        float err = got > want ? got - want : want - got;
        if (err > worst) worst = err;
    }
    if (worst > 1e-6f) { std::fprintf(stderr, "saxpy: max error %g\\n", worst); return 1; }
    std::printf("saxpy: PASS\\n");
    return 0;
}
"""

JOB = {
    "kernel": "saxpy",
    "sources": ["kernels/saxpy.cpp"],
    "headers": ["kernels/saxpy.h"],
    "pass_marker": "saxpy: PASS",
    "refusal_marker": "saxpy needs CC",
    "timeout": 30,
    "variants": {
        "plain": {
            "build": "g++ -O1 -o {binary} {sources}",
            "inspect": "objdump -d {binary}",
            "instructions": {"call": 1},
            "cc": {"min": "7.5"},
        }
    },
}


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=farm test", "-c", "user.email=farm@test", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return done.stdout.strip()


def commit(root: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", *files)
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def farm_in_repo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`farm ARGS` in the farm's git repository `cwd`: no FARM_* of the caller's shell, and git
    stops at `cwd` (a farm outside git must not find the checkout that holds the test folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    return farm(*args, cwd=cwd, env=env, extra_env={"GIT_CEILING_DIRECTORIES": str(Path(cwd).resolve().parent)})


def farm_yaml(nodes: dict[str, object]) -> str:
    return yaml.safe_dump(
        {"database": "sqlite:///results.db", "reports": "reports", "jobs": "jobs", "retries": 0, "nodes": nodes}
    )


@pytest.fixture(scope="module")
def history(ssh_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bisect") / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    placeholder = {"t4": {"host": "t4.example.invalid", "user": "farm", "gpu": "Tesla T4", "cc": "7.5"}}
    shas = {"root": str(root)}
    shas["c0"] = commit(
        root,
        "saxpy passes",
        {
            "farm.yaml": farm_yaml(placeholder),
            "jobs/saxpy.yaml": yaml.safe_dump(JOB, sort_keys=False),
            "kernels/saxpy.cpp": SAXPY,
            "kernels/saxpy.h": "#define SAXPY_A 2.0f\n",
            "NOTES.md": "notes\n",
        },
    )
    git(root, "tag", "v1")
    shas["c1"] = commit(root, "notes: more", {"NOTES.md": "notes\nmore\n"})
    shas["c2"] = commit(root, "saxpy: shorter timeout", {"jobs/saxpy.yaml": yaml.safe_dump({**JOB, "timeout": 20})})
    shas["c3"] = commit(root, "bench: a script", {"bench/run.sh": "echo bench\n"})
    shas["c4"] = commit(root, "saxpy: a tuned scale", {"kernels/saxpy.h": "#define SAXPY_A 2.5f  // tuned\n"})
    shas["c5"] = commit(root, "notes: even more", {"NOTES.md": "notes\nmore\nand more\n"})
    shas["c6"] = commit(root, "saxpy: a comment", {"kernels/saxpy.cpp": "// saxpy\n" + SAXPY})
    shas["c7"] = commit(root, "notes: the last", {"NOTES.md": "done\n"})
    workdir = root.parent / "node"
    nodes = {"t4": ssh_fleet["t4"].farm_entry(workdir), "down": ssh_fleet["down"].farm_entry(workdir)}
    (root / "farm.yaml").write_text(farm_yaml(nodes))  # today's farm.yaml: not committed
    return shas


def commits_run(db: Path) -> list[str]:
    runs = query(db, "SELECT selection FROM runs WHERE trigger = 'bisect' ORDER BY id")
    return [re.search(r" at ([0-9a-f]{40})$", r["selection"]).group(1) for r in runs]


def test_bisect_names_the_planted_regression_and_runs_only_commits_that_touch_the_inputs(history):
    root = Path(history["root"])
    status, head = git(root, "status", "--porcelain", "--untracked-files=no"), git(root, "rev-parse", "HEAD")
    done = farm_in_repo("bisect", "saxpy:plain", "--node", "t4", "--good", "v1", "--bad", "HEAD", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    c = history
    assert f"first bad commit: {c['c4']} (" in done.stdout and "saxpy: a tuned scale" in done.stdout, done.stdout
    assert re.search(r"^  there:      fail at run: .*max error 2", done.stdout, re.M), done.stdout
    # its parent (c3, unrelated) is judged by c2, which has the same inputs: never run itself
    assert f"  its parent: {c['c3'][:12]} pass: " in done.stdout, done.stdout
    assert f"the same inputs as {c['c2'][:12]})" in done.stdout, done.stdout
    # bad end, good end, then the halves: c4 (bad), c2 (good); c1, c3, c5 (unrelated) and c6 never
    db = root / "results.db"
    assert commits_run(db) == [c["c7"], c["c0"], c["c4"], c["c2"]]
    assert "runs: 4 (1 with a build reused: no compiler run); untestable: 0; commits after --good: 7, of which 3" in (
        done.stdout
    )
    # c2 only changed the job's timeout: its build key is v1's, so nvcc (here g++) was not run again
    rows = query(
        db,
        "SELECT r.outcome, r.build_cached, r.build_key, runs.trigger FROM results r JOIN runs ON runs.id = r.run_id "
        "ORDER BY r.id",
    )
    assert [(r["outcome"], r["build_cached"], r["trigger"]) for r in rows] == [
        ("fail", 0, "bisect"),
        ("pass", 0, "bisect"),
        ("fail", 0, "bisect"),
        ("pass", 1, "bisect"),
    ]
    assert rows[1]["build_key"] == rows[3]["build_key"] != rows[2]["build_key"]
    page = Path(re.search(r"^page: (.+)$", done.stdout, re.M).group(1))
    assert page == root / "reports" / "cells" / "3.html" and "saxpy: max error 2\n" in page.read_text()
    assert (
        git(root, "status", "--porcelain", "--untracked-files=no") == status and git(root, "rev-parse", "HEAD") == head
    )
    # old commits are not the fleet's standing: the matrix keeps showing today's (none yet) results
    store = Store(f"sqlite:///{db}")
    try:
        latest_verdict, latest_any = store.standing(upto=10**6)
    finally:
        store.close()
    assert latest_verdict == {} and latest_any == {}


def test_selection_and_revision_errors_exit_3_and_run_nothing(history):
    root = Path(history["root"])
    before = len(query(root / "results.db", "SELECT id FROM runs"))
    cases = [
        (["saxpy", "--good", "HEAD", "--bad", "v1"], "which is not an ancestor of --bad 'v1'"),
        (
            ["nosuch", "--good", "v1", "--bad", "HEAD"],
            "'HEAD' (" + history["c7"][:12] + "), where there is no job for kernel 'nosuch' (jobs/nosuch.yaml",
        ),
        (["saxpy:fast", "--good", "v1", "--bad", "HEAD"], "kernel 'saxpy' has no variant 'fast' (it has plain)"),
        (["saxpy", "--good", "v9", "--bad", "HEAD"], "--good: found 'v9', which is not a commit of this repository"),
        (["saxpy", "--good", "--help", "--bad", "HEAD"], "--good: found '--help'; expected a revision"),
        (["saxpy", "--good", "v1", "--bad", "v1"], "the same commit as --bad"),
        (["saxpy", "--node", "nowhere", "--good", "v1", "--bad", "HEAD"], "no node named nowhere"),
    ]
    for args, says in cases:
        node = [] if "--node" in args else ["--node", "t4"]
        done = farm_in_repo("bisect", *args, *node, cwd=root)
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("Error: ") and says in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert len(query(root / "results.db", "SELECT id FROM runs")) == before


def test_ends_that_bracket_no_regression_exit_1_and_a_node_down_exits_4(history):
    root = Path(history["root"])
    done = farm_in_repo("bisect", "saxpy:plain", "--node", "t4", "--good", "v1", "--bad", history["c2"], cwd=root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"--bad {history['c2'][:12]} is as expected: nothing to bisect" in done.stdout
    assert "bisect: exit 1 (no first bad commit)" in done.stdout
    done = farm_in_repo("bisect", "saxpy:plain", "--node", "t4", "--good", history["c4"], "--bad", "HEAD", cwd=root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"--good {history['c4'][:12]} is not as expected (fail at run: " in done.stdout, done.stdout
    done = farm_in_repo("bisect", "saxpy:plain", "--node", "down", "--good", "v1", "--bad", "HEAD", cwd=root)
    assert done.returncode == 4, done.stdout + done.stderr
    assert re.search(r"^bad end\s+\w{12} infra: infra-error", done.stdout, re.M), done.stdout
    assert "no verdict either way" in done.stdout and "first bad commit" not in done.stdout
    assert commits_run(root / "results.db")[-1] == history["c7"]  # the walk stopped at the first run


def test_untestable_commits_are_skipped_and_never_guessed_past(tmp_path):
    """On the toy farm's local node (compile-only): a commit whose job file does
    not load cannot be judged, so when it sits right before the regression the
    answer is the two of them, exit 1."""
    root = tmp_path / "toy"
    toy_farm(root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "farm.yaml", "jobs", "kernels")
    git(root, "commit", "-q", "-m", "toy")
    good = git(root, "rev-parse", "HEAD")
    job = (root / "jobs" / "toy.yaml").read_text()
    broken = commit(root, "toy: a job file that does not load", {"jobs/toy.yaml": job + "colour: blue\n"})
    regression = commit(
        root, "toy: fix the job, break the build", {"jobs/toy.yaml": job, "kernels/toy.cpp": "int main( {"}
    )
    commit(root, "notes", {"NOTES.md": "notes\n"})
    done = farm_in_repo("bisect", "toy:plain", "--node", "here", "--good", good, "--bad", "HEAD", cwd=root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(rf"^step\s+{broken[:12]} untestable: .*colour", done.stdout, re.M), done.stdout
    assert re.search(rf"^step\s+{regression[:12]} bad: build-fail", done.stdout, re.M), done.stdout
    says = f"the first bad commit is one of {broken[:12]}, {regression[:12]}: {broken[:12]} cannot be tested"
    assert says in done.stdout, done.stdout
    assert "runs: 3 (0 with a build reused: no compiler run); untestable: 1;" in done.stdout, done.stdout


def test_a_farm_outside_git_is_refused(tmp_path):
    done = farm_in_repo(
        "bisect", "toy:plain", "--node", "here", "--good", "HEAD~1", "--bad", "HEAD", cwd=toy_farm(tmp_path).parent
    )
    assert done.returncode == 3 and "outside any git repository" in done.stderr, done.stderr


def test_a_commit_is_judged_on_the_cells_that_are_bad_at_the_bad_end(tmp_path):
    """`farm bisect KERNEL` (every variant): variant b is broken for a while in the
    middle of the history and fixed before --bad; variant a breaks at c5. The walk
    watches only the cells bad at --bad (a), so b's old failure is never taken for
    the regression (found in review: any bad cell made a commit bad)."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    source = "int main() {\n#ifdef VARIANT_A\n  return 0;\n#endif\n  return 0;\n}\n"
    broken_a = source.replace("  return 0;\n#endif", "  this is not C++;\n#endif")

    def job(b_flags: str, timeout: int = 60) -> str:
        return yaml.safe_dump(
            {
                "kernel": "toy",
                "sources": ["kernels/toy.cpp"],
                "pass_marker": "toy: PASS",
                "refusal_marker": "toy needs CC",
                "timeout": timeout,
                "variants": {
                    "a": {
                        "build": "g++ -DVARIANT_A -o {binary} {sources}",
                        "inspect": "objdump -d {binary}",
                        "cc": {"min": "7.5"},
                    },
                    "b": {
                        "build": f"g++ {b_flags} -o {{binary}} {{sources}}",
                        "inspect": "objdump -d {binary}",
                        "cc": {"min": "7.5"},
                    },
                },
            }
        )

    farm_yaml = yaml.safe_dump({"nodes": {"here": {"transport": "local", "workdir": str(tmp_path / "work")}}})
    shas = {"c0": commit(root, "c0", {"farm.yaml": farm_yaml, "jobs/toy.yaml": job(""), "kernels/toy.cpp": source})}
    git(root, "tag", "good")
    shas["c1"] = commit(root, "c1: b links a library that does not exist", {"jobs/toy.yaml": job("-lnosuchlib")})
    shas["c2"] = commit(root, "c2: a timeout", {"jobs/toy.yaml": job("-lnosuchlib", 30)})
    shas["c3"] = commit(root, "c3: another timeout", {"jobs/toy.yaml": job("-lnosuchlib", 40)})
    shas["c4"] = commit(root, "c4: b fixed", {"jobs/toy.yaml": job("", 40)})
    shas["c5"] = commit(root, "c5: a broken", {"kernels/toy.cpp": broken_a})
    done = farm_in_repo("bisect", "toy", "--node", "here", "--good", "good", "--bad", "HEAD", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"first bad commit: {shas['c5']} (" in done.stdout, done.stdout
    # c1..c3, where b was broken, were judged good on a (or never run): none is named
    for old in ("c1", "c2", "c3"):
        assert f"first bad commit: {shas[old]}" not in done.stdout
