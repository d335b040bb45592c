"""Red-team round 49: cross-cell and cross-run interference on a node."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, query, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

from orchestrator.run.stages import base as stages_base


@pytest.fixture
def small_tmp(tmp_path: Path) -> Iterator[Path]:
    """A node temporary folder on a tmpfs of its own with 1500 inodes (no memory to speak of): a
    kernel that makes 600 empty files there leaves it short of the farm's 1024 free inodes, as one
    that fills the node's /tmp would, without filling this shared machine's /tmp."""
    folder = tmp_path / "node-tmp"
    folder.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=300m,nr_inodes=1500,mode=1777", "rt49", str(folder)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_kernel_that_fills_the_nodes_temporary_folder_hides_no_failure(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, small_tmp: Path
) -> None:
    """A confined kernel could write the node's own temporary folder by name ($TMPDIR of the
    login, else /tmp), where the cells' folders are not in it. One that failed its numbers
    (MODE_FAILNUM) after filling it (here: out of inodes) left the node short of room once its
    own files were removed, and the farm judged its failure "the node ran out of room during the
    cell": infra-error, which the ledger does not flag as now-failing. A later cell's failure on
    that node was infra-error too. A confined run (inspection, sanitizer run) may now write only
    its work folder, its own $TMPDIR, /dev and /proc: the node's temporary folder is not its to
    fill, so a short one is still the node's fault, and this kernel's fail stays a fail."""
    fill = f"cd {small_tmp} && seq 1 600 | sed s/^/rt49-/ | xargs touch; cd - >/dev/null; {{binary}}"
    variants = {
        "a-fills": standin_variant("FAILNUM", MIN75, "MIN_CC=75", run=fill),
        "b-later": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4", env={"TMPDIR": str(small_tmp)})}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    found = rows(tmp_path / "results.db", summary.run_id)
    for name in variants:
        row = found[(name, "Tesla T4")]
        assert row["outcome"] == "fail", (name, row["reason"])
    assert not list(small_tmp.glob("rt49-*"))


def test_a_kernel_that_takes_the_execute_bits_of_cached_builds_fails_no_later_run(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """Landlock does not handle chmod (nor chown, utime, setxattr): a confined kernel could not
    write the node's work folder, but it could change the mode of every file there. One that
    passed, then took the execute bits of every file in it (`find WORKDIR -type f -perm -u+x |
    xargs chmod a-x`), failed the next cell of the run, a plain pass, as "the kernel's copy was
    gone or not executable when the run called it ... changed by the run itself" (its copy,
    taken at its build, hashed as built), and in the next run both cells, whose copies took the
    cached builds' mode ("as cp without -p"). A copy now gets the farm's mode (0755 less the
    umask), and a run sets its folders' and its copy's modes again before it hashes it."""
    workdir = tmp_path / "work-t4"
    strip = f"{{binary}}; find {workdir} -type f -perm -u+x -print0 | xargs -0 chmod a-x"
    variants = {
        "a-strips": standin_variant("PASS", MIN75, "MIN_CC=75", run=strip),
        "b-plain": standin_variant("PASS", MIN75, "MIN_CC=75"),
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(workdir)}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    said = []
    for _ in range(2):
        _, summary = run(config)
        found = rows(tmp_path / "results.db", summary.run_id)
        said += [(name, found[(name, "Tesla T4")]["outcome"], found[(name, "Tesla T4")]["reason"]) for name in variants]
    assert [outcome for _, outcome, _ in said] == ["pass"] * 4, said


# the farm's 10 s slack, the later cells' 30 s limits and a 40 s hold, scaled down: the hold still
# outlasts what a run on GPU 1 waited before (its own GPU's queue plus the slack)
SLACK_S = 3
B_LIMIT_S = 5
HOLD_S = 15

HOLD = """import fcntl, glob, os, sys, time
# every GPU lock of the node's work folder but its own (the runner holds that one): a read-only
# open is all flock needs, and Landlock handles neither
held = []
end = time.monotonic() + 20
while time.monotonic() < end and not held:
    for path in glob.glob(sys.argv[1] + "/gpu-*.lock"):
        f = open(path)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(f)
        except OSError:
            f.close()
    time.sleep(0.05)
print("rt49 held", len(held), file=sys.stderr)
time.sleep(float(sys.argv[2]))
"""


def test_a_kernel_that_holds_another_gpus_lock_fails_no_cell_of_that_gpu(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's GPUs are queued on its lock files (flock on WORKDIR/gpu-UUID.lock), and a run waits
    on its GPU's lock only as long as the runs the farm queued there before it, plus 10 s. A
    kernel on GPU 0 could open GPU 1's lock read-only and flock it (Landlock handles no flock)
    for its whole run: the next run on GPU 1 then gave up on its lock and was infra-error
    ("stayed locked ... another farm run on this node, or a stuck kernel"). A run now waits as
    long as the node's busiest GPU has runs queued (plus 10 s): whatever holds its lock is then
    a kernel the farm will have killed by that time, or not the farm's.
    Figure: every cell passes; the farm's numbers scaled down (slack 3 s, the later cells' limits 5 s,
    a 15 s hold; 10, 30 and 40 s took all of this test's 40 s): before the fix b1 is still infra-error."""
    monkeypatch.setattr(stages_base, "QUEUE_SLACK", SLACK_S)
    node = ssh_fleet.add(f"two-{tmp_path.name[-12:]}", [CARDS["t4"], CARDS["t4"]])
    hold = tmp_path / "hold.py"
    hold.write_text(HOLD)
    workdir = tmp_path / "work-two"
    prelude = tmp_path / "hold.sh"
    prelude.write_text(f"python3 {hold} {workdir} {HOLD_S}\n")
    variants = {
        "a-holds": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude, timeout=90),
        **{f"b{i}": standin_variant("PASS", MIN75, "MIN_CC=75", timeout=B_LIMIT_S) for i in range(3)},
    }
    try:
        config = make_farm(tmp_path, {"two": node.farm_entry(workdir)}, [standin_job("standin", variants)])
        _, summary = run(config)
    finally:
        node.stop()
    found = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    said = {row["variant"]: (row["outcome"], row["reason"]) for row in found}
    assert len(said) == len(variants) and all(outcome == "pass" for outcome, _ in said.values()), said
