"""Verdicts a reviewer can sign (issue 9): each case that once gave an
authoritative-looking wrong verdict, on real sshd nodes with stand-in cards.

    forged cache      a kernel rewrites another cell's cached binary and the staged
                      sources: the next run rebuilds and re-ships, and says so
    two cards         a node with a Tesla T4 and an H100: each cell is judged on its own card
    identity          a header's bytes are part of the certificate: editing it makes it stale
    headers           shipped and hashed, never passed to nvcc
    reasons           the signal's name and the kernel's own last stderr line
    order             CC columns as numbers (7.5 before 10.0)
    deterministic     rendering the same database twice writes the same bytes
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import (
    CARDS,
    Card,
    Fleet,
    landlock_abi,
    processes_matching,
    query,
    smi_on_path,
    standin_job,
    standin_variant,
)

from orchestrator.config import inputs
from orchestrator.config.farm import load_farm
from orchestrator.plan import plan_cells
from orchestrator.report import export
from orchestrator.report.kernel_inputs import current_inputs
from orchestrator.report.model import collect
from orchestrator.report.site import render
from orchestrator.report.standing import cc_key
from orchestrator.run.bundle import Placed
from orchestrator.run.cell import cell_paths
from orchestrator.run.scheduler import run_cells
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.store.database import Store

MIN75 = {"min": "7.5"}
EXACT90 = {"exactly": "9.0"}
B200 = Card("NVIDIA B200", "10.0", memory="183359 MiB")


def run(config: Path, selectors: list[str] | None = None):
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm, selectors), cache_dir=config.parent / "archives")
    finally:
        store.close()
    return farm, summary


def rows(db: Path, run_id: int) -> dict[tuple[str, str], sqlite3.Row]:
    return {(r["variant"], r["device"]): r for r in query(db, "SELECT * FROM results WHERE run_id = ?", run_id)}


# ------------------------------------------------------------------ case 2


FORGER_RUN = (
    "for v in ../../../../../builds/*/standin-victim-*/standin-victim; do "
    'cp ../../../../../builds/*/standin-passer-*/standin-passer "$v"; done; '
    "for s in ../../../../../bundles/*/kernels/standin.cpp; do echo '// forged' >> \"$s\"; done; {binary}"
)


def test_a_kernel_cannot_forge_another_cells_verdict(ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str) -> None:
    """At 0f1e6ec the victim, which really fails, was judged `pass` ("fixed") on
    the second run: its cached binary was the forger's copy of a passing one.
    The python runners confine the kernel, so the forger cannot rewrite the cache
    there; a process of the node's user outside the farm still can, and does here:
    the farm's hash checks are what stop it."""
    variants = {
        "victim": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
        "passer": standin_variant("PASS", MIN75, "MIN_CC=75"),
        "forger": standin_variant("PASS", MIN75, "MIN_CC=75", run=FORGER_RUN),
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4", build_jobs=1)}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    _, first = run(config)
    db = tmp_path / "results.db"
    one = rows(db, first.run_id)
    assert [one[(v, "Tesla T4")]["outcome"] for v in variants] == ["fail", "pass", "pass"]
    forged = list((tmp_path / "work-t4" / "builds" / "t4").glob("standin-victim-*/standin-victim"))
    passer = list((tmp_path / "work-t4" / "builds" / "t4").glob("standin-passer-*/standin-passer"))
    assert forged and passer
    if runner == "shell":  # unconfined: the kernel rewrote the cache and the staged sources itself
        assert forged[0].read_bytes() == passer[0].read_bytes(), "the forger did not rewrite the cache"
    else:
        assert forged[0].read_bytes() != passer[0].read_bytes(), "the confined forger rewrote the cache"
        forged[0].write_bytes(passer[0].read_bytes())
        for source in (tmp_path / "work-t4" / "bundles").glob("*/kernels/standin.cpp"):
            with source.open("a") as handle:
                handle.write("// forged\n")

    farm, second = run(config)
    two = rows(db, second.run_id)
    victim = two[("victim", "Tesla T4")]
    assert victim["outcome"] == "fail", victim["reason"]
    build = json.loads(victim["stage_details"])["build"]
    assert "cached build altered on the node" in build["detail"] and "rebuilt" in build["detail"]
    assert not victim["build_cached"]
    assert victim["binary_sha256"] == one[("victim", "Tesla T4")]["binary_sha256"]
    # the staged sources were altered too: shipped again, and the result hashes what was compiled
    snapshot = query(db, "SELECT * FROM node_snapshots WHERE run_id = ?", second.run_id)[0]
    assert snapshot["bytes_shipped"] > 0
    attempts = query(db, "SELECT * FROM results WHERE run_id = ?", second.run_id)
    assert all(json.loads(r["sources"]) == farm.jobs["standin"].file_sha256 for r in attempts)
    stage = json.loads(victim["stage_details"])["stage"]
    assert "altered" in stage["detail"] and "shipped again" in stage["detail"], stage


# ------------------------------------------------------------------ case 3


def test_a_copy_swapped_while_its_cell_waits_for_the_gpu_is_not_run(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """The cell's private copy was hashed before it queued for the GPU's lock: whatever
    swapped it meanwhile (the kernel running ahead of it, as an adversarial review's
    daemon did) had it run, and a failing binary's cell said pass. It is hashed once the
    lock is this cell's: the swapped copy is not run, and the cell is not pass."""
    import fcntl
    import threading
    import time

    work = tmp_path / "work-t4"
    variants = {"f": standin_variant("FAILNUM", {"min": "7.5"}, "MIN_CC=75")}
    config = make_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(work)}, [standin_job("standin", variants)])
    work.mkdir(parents=True, exist_ok=True)
    lock = open(work / f"gpu-{ssh_fleet['t4'].cards[0].uuid(0)}.lock", "a")  # noqa: SIM115 - held across the run
    fcntl.flock(lock, fcntl.LOCK_EX)  # another's kernel holds the GPU
    done: list = []
    thread = threading.Thread(target=lambda: done.append(run(config)), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not (copies := list(work.glob("cells/*/t4/standin+f*/bin/standin-f"))):
            assert time.monotonic() < deadline, "the cell never got its copy"
            time.sleep(0.05)
        time.sleep(1.0)  # inspected, and waiting for the lock
        fake = copies[0].with_name("fake")
        fake.write_text('#!/bin/sh\necho "standin: PASS"\n')
        fake.chmod(0o755)
        fake.replace(copies[0])
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    thread.join(120)
    ((_, summary),) = done
    row = rows(tmp_path / "results.db", summary.run_id)[("f", "Tesla T4")]
    assert row["outcome"] != "pass", row["reason"]
    tries = query(tmp_path / "results.db", "SELECT error FROM attempts WHERE variant = 'f' AND status = 'infra'")
    assert any("changed on the node after inspection" in (t["error"] or "") for t in tries), [dict(t) for t in tries]


def test_kernels_whose_names_join_alike_keep_their_cells_apart(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """Kernel `a-b` variant `c` and kernel `a` variant `b-c`: their cells' folders were both
    `a-b-c`, and the failing kernel was judged pass on the other's output (found by a red-team
    helper, 5 runs in 6 on a node with two cards). Each has a folder of its own now."""
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4", build_jobs=2)}
    jobs = [
        standin_job("a-b", {"c": standin_variant("FAILNUM", MIN75, "MIN_CC=75", run="sleep 1; {binary}")}),
        standin_job("a", {"b-c": standin_variant("PASS", MIN75, "MIN_CC=75", run="{binary}; sleep 1")}),
    ]
    config = make_farm(tmp_path, nodes, jobs)
    farm = load_farm(config)
    node = NodeSnapshot("t4", "/w", "h", "Linux", "Tesla T4", None, None, None, 1, "nvcc", "13.0.88", "", None, None)
    seen = {
        cell_paths(node, farm.jobs[c.kernel].spec.variants[c.variant], c, "1-t", Placed("/s", "0"), {}).run_dir
        for c in (*plan_cells(farm), *(cell.on("Tesla T4", True) for cell in plan_cells(farm)))
    }
    assert len(seen) == 4, seen
    run(config)
    got = {(r["kernel"], r["variant"]): r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    assert got[("a-b", "c")]["outcome"] == "fail", got[("a-b", "c")]["reason"]
    assert got[("a", "b-c")]["outcome"] == "pass", got[("a", "b-c")]["reason"]
    assert b"standin: PASS" not in bytes(got[("a-b", "c")]["stdout"])


def test_each_cell_is_judged_on_its_own_card(fleet_extra: dict, make_farm, tmp_path: Path) -> None:
    """A node holding a Tesla T4 (GPU 0) and an H100 (GPU 1). At 0f1e6ec every
    cell was judged against GPU 0 while running on either: 3 of 6 wrong."""
    node = fleet_extra["duo"]
    variants = {
        "min75": standin_variant("PASS", MIN75, "MIN_CC=75"),
        "hopper": standin_variant("PASS", EXACT90, "EXACT_CC=90"),
        "ampere": standin_variant("PASS", {"min": "8.0"}, "MIN_CC=80"),
    }
    entry = node.farm_entry(tmp_path / "work-duo")
    entry.pop("gpu"), entry.pop("cc")
    config = make_farm(tmp_path, {"duo": entry}, [standin_job("standin", variants)])
    _, summary = run(config)
    got = rows(tmp_path / "results.db", summary.run_id)
    t4, h100 = CARDS["t4"], CARDS["h100"]
    want = {
        ("min75", t4.name): "pass",
        ("min75", h100.name): "pass",
        ("hopper", t4.name): "expected-refusal",
        ("hopper", h100.name): "pass",
        ("ampere", t4.name): "expected-refusal",
        ("ampere", h100.name): "pass",
    }
    assert {k: r["outcome"] for k, r in got.items()} == want
    for (_, device), row in got.items():
        index = 0 if device == t4.name else 1
        card = node.cards[index]
        assert (row["gpu_index"], row["gpu_uuid"], row["cc"]) == (index, card.uuid(index), card.cc)
    assert summary.exit_code == 0
    # the matrix has a column per card, and the labels name the card
    index_html = render(Store(f"sqlite:///{tmp_path / 'results.db'}"), tmp_path / "reports").read_text()
    assert index_html.count('<th data-node="duo"') == 2
    assert 'data-device="Tesla T4"' in index_html and f'data-device="{h100.name}"' in index_html


def test_gpus_restricts_the_cards_used(fleet_extra: dict, make_farm, tmp_path: Path) -> None:
    entry = fleet_extra["duo"].farm_entry(tmp_path / "work-duo", gpus=[1])
    entry.pop("gpu"), entry.pop("cc")
    variants = {"min75": standin_variant("PASS", MIN75, "MIN_CC=75")}
    config = make_farm(tmp_path, {"duo": entry}, [standin_job("standin", variants)])
    _, summary = run(config)
    got = rows(tmp_path / "results.db", summary.run_id)
    assert list(got) == [("min75", CARDS["h100"].name)] and got[("min75", CARDS["h100"].name)]["gpu_index"] == 1


@pytest.mark.usefixtures("runner")  # with either node runner
def test_one_kernel_at_a_time_on_each_gpu(
    fleet_extra: dict, make_farm, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Runs queue on the node, one lock file per GPU (flock): with 4 build slots
    and 8 cells on a node with two T4s, each GPU runs one kernel at a time, and
    both GPUs are used. Each kernel logs its start and end (node clock, ns) and
    its CUDA_VISIBLE_DEVICES; no two intervals on one GPU overlap."""
    # in /dev/shm: a kernel may write nothing outside its own work folder, /dev and /proc
    log = Path("/dev/shm") / f"farm-test-gpu-{os.getpid()}-{tmp_path.name}.log"
    request.addfinalizer(lambda: log.unlink(missing_ok=True))
    run_line = (
        f'echo "start $(date +%s%N) $CUDA_VISIBLE_DEVICES" >> {log}; sleep 0.4; {{binary}}; rc=$?; '
        f'echo "end $(date +%s%N) $CUDA_VISIBLE_DEVICES" >> {log}; exit $rc'
    )
    variants = {f"v{i}": standin_variant("PASS", MIN75, "MIN_CC=75", run=run_line) for i in range(8)}
    entry = fleet_extra["pair"].farm_entry(tmp_path / "work-pair", build_jobs=4)
    config = make_farm(tmp_path, {"pair": entry}, [standin_job("standin", variants)])
    _, summary = run(config)
    got = rows(tmp_path / "results.db", summary.run_id)
    assert {k[0]: r["outcome"] for k, r in got.items()} == {v: "pass" for v in variants}
    spans: dict[str, list[list[int]]] = {}
    for line in log.read_text().splitlines():
        word, clock, gpu = line.split()
        if word == "start":
            spans.setdefault(gpu, []).append([int(clock), 0])
        else:
            open_span = [span for span in spans[gpu] if span[1] == 0]
            assert len(open_span) == 1, f"two kernels at once on {gpu}: {spans[gpu]}"
            open_span[0][1] = int(clock)
    t4 = fleet_extra["pair"].cards
    assert set(spans) == {t4[0].uuid(0), t4[1].uuid(1)}, "both GPUs run kernels"
    assert sum(len(v) for v in spans.values()) == 8
    for gpu, intervals in spans.items():
        intervals.sort()
        for (_, end), (start, _) in itertools.pairwise(intervals):
            assert start >= end, f"kernels overlapped on {gpu}"
    assert {r["gpu_uuid"] for r in got.values()} == set(spans)


# ------------------------------------------------------------ cases 4 and 5

HEADERED = """\
#include <stdio.h>
#include "headered.h"
int main(void) { printf("%s\\n", PASS_TEXT); return 0; }
"""


def test_headers_are_compiled_against_and_named_by_the_certificate(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    job = standin_job(
        "headered",
        {"plain": {"build": "g++ -O1 -o {binary} {sources}", "inspect": "objdump -d {binary}", "cc": MIN75}},
        sources=["kernels/headered.cpp"],
        headers=["kernels/headered.h"],
    )
    config = make_farm(tmp_path, nodes, [job])
    (tmp_path / "kernels" / "headered.cpp").write_text(HEADERED)
    header = tmp_path / "kernels" / "headered.h"
    header.write_text('#define PASS_TEXT "standin: PASS"\n')
    farm, summary = run(config)
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    assert row["outcome"] == "pass", row["reason"]
    assert "headered.cpp" in row["build_command"] and "headered.h" not in row["build_command"]
    files = json.loads(row["sources"])
    assert set(files) == {"kernels/headered.cpp", "kernels/headered.h"}
    assert row["identity"] == inputs.identity(files, {}, ["kernels/headered.cpp"])
    # the same bytes with the header compiled too are another program: another identity
    assert row["identity"] != inputs.identity(files, {}, ["kernels/headered.cpp", "kernels/headered.h"])

    # as if that card were real hardware: the pass certifies these inputs...
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE results SET real_gpu = 1 WHERE id = ?", (row["id"],))
    store = Store(farm.database_url)
    entry = collect(store, summary.run_id, farm).ledgers[0]
    assert entry.sha256 == row["identity"] and entry.capabilities["7.5"].state == "VERIFIED"
    assert set(entry.files) == set(files)
    # ...and editing only the header (never passed to nvcc) makes it stale
    header.write_text('#define PASS_TEXT "standin: PASS" /* edited */\n')
    entry = collect(store, summary.run_id, load_farm(config)).ledgers[0]
    assert entry.capabilities["7.5"].state == "stale"
    (flag,) = [text for kind, text in entry.flags if kind == "stale"]
    assert "Changed since: kernels/headered.h" in flag


WEAK_MAIN = r"""#include <cstdio>
extern "C" __attribute__((weak)) int broken() { return 0; }
int main() {
    if (broken()) { fprintf(stderr, "standin: wrong numbers\n"); return 1; }
    puts("standin: PASS");
    return 0;
}
"""


def test_a_file_moved_from_headers_to_sources_is_another_build_and_identity(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """Found by a red-team helper: a job that compiles b.cpp, once shipped only as a header, is
    another program from the same bytes (here its strong `broken()` fails it). The build key and
    the certificate identity both name which files are compiled: the second run builds afresh
    and fails, where it reused the first run's cached binary and passed."""
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    variant = {"build": "g++ -O1 -o {binary} {sources}", "inspect": "objdump -d {binary}", "cc": MIN75}
    got = {}
    for sources, headers in ((["kernels/a.cpp"], ["kernels/b.cpp"]), (["kernels/a.cpp", "kernels/b.cpp"], [])):
        config = make_farm(tmp_path, nodes, [standin_job("ab", {"v": variant}, sources=sources, headers=headers)])
        (tmp_path / "kernels" / "a.cpp").write_text(WEAK_MAIN)
        (tmp_path / "kernels" / "b.cpp").write_text('extern "C" int broken() { return 1; }\n')
        _, summary = run(config)
        got[len(sources)] = rows(tmp_path / "results.db", summary.run_id)[("v", "Tesla T4")]
    assert got[1]["outcome"] == "pass", got[1]["reason"]
    assert (got[2]["outcome"], got[2]["build_cached"]) == ("fail", 0), got[2]["reason"]
    assert got[1]["identity"] != got[2]["identity"]


def test_the_cutlass_dependency_is_part_of_the_identity(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    farm = load_farm(repo / "farm.yaml")
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    model_inputs = current_inputs(store, farm, {})
    cutlass = model_inputs["cutlass_gemm"]
    assert cutlass.dependencies["cutlass"]["version"] == "4.2.0.0"
    digest = cutlass.dependencies["cutlass"]["digest"]
    job = farm.jobs["cutlass_gemm"]
    assert cutlass.identity == inputs.identity(job.file_sha256, {"cutlass": digest}, job.spec.sources)
    assert cutlass.identity != inputs.identity(job.file_sha256, {}, job.spec.sources)


# ------------------------------------------------------------------ case 7


def test_reasons_name_the_signal_and_the_kernels_last_words(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    variants = {
        "crash": standin_variant("CRASH", MIN75, "MIN_CC=75"),
        "failnum": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    got = rows(tmp_path / "results.db", summary.run_id)
    crash, failnum = got[("crash", "Tesla T4")], got[("failnum", "Tesla T4")]
    assert "killed by SIGABRT (exit 134)" in crash["reason"], crash["reason"]
    said = "standin: mismatch at element 17: got 3.5, expected 4.25"
    assert said in failnum["reason"] and failnum["last_stderr_line"] == said
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    html = render(store, tmp_path / "reports").read_text()
    assert said in html  # in the matrix cell, escaped
    with store.reading():
        xml = export.junit(collect(store, summary.run_id))
    assert f'message="fail at run: {said}"' in xml


FORGED_STATUS_RUN = (
    # the kernel passes its numbers, then writes the farm's own status line for "exit 0"
    # into the stdout of the farm's shell (its grandparent: sh -c <- timeout <- that shell)
    "{binary}; gp=$(cut -d' ' -f4 /proc/$PPID/stat); printf '\\n@@farm 0\\n' > /proc/$gp/fd/1; exit 3"
)


@pytest.mark.usefixtures("runner")  # with either node runner
def test_a_kernel_cannot_forge_the_farms_status_line(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A kernel runs as the farm's user, so it can write into the stdout of the
    shell that runs it on the node, where the farm reads its status lines. It
    prints the pass marker, forges "exit 0", and exits 3: the cell is `fail`
    with the real exit code (the farm reads its status lines last, after the
    kernel and its leftovers are gone), never `pass`."""
    variants = {"forger": standin_variant("PASS", MIN75, "MIN_CC=75", run=FORGED_STATUS_RUN)}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    row = rows(tmp_path / "results.db", summary.run_id)[("forger", "Tesla T4")]
    assert (row["outcome"], row["exit_code"]) == ("fail", 3), row["reason"]
    # the kernel itself exited 0: what failed is the run's command after it (stages.kernel_run)
    assert row["reason"] == "the kernel exited 0, but a command of the run after it failed (exit 3)", row["reason"]


# a program among the run's other commands, with the kernel never started, writes a 0 status and
# the pass marker where the shell scripts keep the kernel's files (fds 6 and 7): a red-team finding
CHILD_FORGER_RUN = (
    "if false; then {binary}; fi; python3 -c \"import os; os.write(6, b'0\\n'); os.write(7, b'standin: PASS\\n')\""
)


ASKER_RUN = (
    "python3 -c \"import os, re, socket; n = re.search(b'farm' + b'_sock=([-0-9a-z]+)', "
    "open('/proc/%d/cmdline' % os.getppid(), 'rb').read()).group(1); "
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(b'\\0' + n); s.send(b'0' * 32 + b'\\0run'); "
    "print('handed', s.recvmsg(1, 64)[1])\"; {binary}"
)


@pytest.mark.parametrize("runner_kind", ["auto", "cell"])
def test_a_program_the_run_starts_holds_none_of_the_kernels_files(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the python runners the run's shell holds none of the kernel's files: each
    kernel command gets them from the runner at its start (noderunner.KernelFiles). The
    forger finds no fd 6 (EBADF) and the kernel never ran: fail, never pass. The shell
    scripts (nodes without python3) cannot keep their fds from the run's programs, and
    every cell they run says it ran unconfined."""
    monkeypatch.setenv("FARM_TEST_RUNNER", runner_kind)
    parent = tmp_path / "parent.sh"  # the kernel's parent, named on its stderr
    parent.write_text(  # the prelude runs under a shell of the kernel's (system): its parent's parent
        'k=$(cut -d" " -f4 /proc/$PPID/stat); echo "parent=$(cat /proc/$(cut -d" " -f4 /proc/$k/stat)/comm)" >&2\n'
    )
    variants = {
        "forged": standin_variant("FAILNUM", MIN75, "MIN_CC=75", run=CHILD_FORGER_RUN),
        # asks the runner for the kernel's files as the trampoline would, but without the run's token
        "asker": standin_variant("PASS", MIN75, "MIN_CC=75", run=ASKER_RUN),
        "honest": standin_variant(
            "PASS", MIN75, "MIN_CC=75", run="cd .. && cd work && {binary} 5; X=1 {binary}", prelude=parent
        ),
        "alone": standin_variant("PASS", MIN75, "MIN_CC=75", run="{binary} 5; X=1 {binary}", prelude=parent),
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    got = rows(tmp_path / "results.db", summary.run_id)
    forged = got[("forged", "Tesla T4")]
    assert forged["outcome"] == "fail", forged["reason"]
    assert "never started the kernel" in forged["reason"], forged["reason"]
    assert "Bad file descriptor" in forged["reason"], forged["reason"]
    # the kernel passed, but something of its run tried to write as it: no pass
    asker = got[("asker", "Tesla T4")]
    assert asker["outcome"] == "fail", asker["reason"]
    assert "other than one of the run's kernel commands (1 refused)" in asker["reason"], asker["reason"]
    details = json.loads(asker["stage_details"])["run"]["detail"]
    assert "handed []" in details, details
    # each kernel command of a run that starts other programs through the runner's trampoline, in
    # the folder and with the variables the run gave it; a run of kernel commands alone without
    # the kernel is the runner's child, not the trampoline's (which could hand it no file then)
    for variant, parent in (("honest", "python"), ("alone", "sh")):
        stderr = bytes(got[(variant, "Tesla T4")]["stderr"]).decode()
        assert f"parent={parent}" in stderr.replace("parent=dash", "parent=sh"), stderr
        assert "parent=farm-trampoline" not in stderr, stderr
    honest = got[("honest", "Tesla T4")]
    assert honest["outcome"] == "pass", honest["reason"]
    details = json.loads(honest["stage_details"])["run"]["detail"]
    assert "started the kernel 2 times (exits 0, 0)" in details, details


ASK_RUNNER = Path(__file__).parent / "forgers" / "ask_runner.py"
MARKER_PRELOAD = Path(__file__).parent / "forgers" / "marker_preload.c"


def test_the_runner_starts_only_the_runs_own_kernel_commands(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A run that starts other programs has its kernel commands started by the node's runner
    (noderunner.KernelFiles), at its trampolines' request: no request gets a file. A program of
    the run that asks, as the trampoline does, for other programs with the copy as their
    argument, or another launcher than the run named, is refused each time, and the cell fails.
    The kernels the runner starts keep what the run gave them: the folder, stdin, variables,
    umask and limits, their status (a signal's too), and a timeout ends them."""
    preload = tmp_path / "marker.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(preload), str(MARKER_PRELOAD)], check=True)
    prelude = tmp_path / "seen.sh"
    prelude.write_text('read -r line; echo "seen: $(basename "$PWD") $(umask) $(ulimit -s) $Y $line" >&2\n')
    variants = {
        "forger": standin_variant(
            "FAILNUM", MIN75, "MIN_CC=75", run=f"python3 {ASK_RUNNER} others && nice -n 5 {{binary}}"
        ),
        # the run's own kernel command asked for with LD_PRELOAD naming a library that prints the
        # marker, and the shell's own call never made (a red-team finding: a false pass)
        "preload": standin_variant(
            "FAILNUM", MIN75, "MIN_CC=75", run=f"python3 {ASK_RUNNER} preload {preload} || {{binary}}"
        ),
        # connections held past the runner's limit: the run's doing, not the node's (it was infra-error)
        "holder": standin_variant("FAILNUM", MIN75, "MIN_CC=75", run=f"python3 {ASK_RUNNER} hold && {{binary}}"),
        "kept": standin_variant(
            "PASS",
            MIN75,
            "MIN_CC=75",
            prelude=prelude,
            run="mkdir -p sub && cd sub && umask 027 && ulimit -s 4096 && export Y=7 && echo in > in.txt && "
            "{binary} < in.txt",
        ),
        "crash": standin_variant("CRASH", MIN75, "MIN_CC=75", run="cd . && {binary}"),
        "crash-alone": standin_variant("CRASH", MIN75, "MIN_CC=75", run="{binary}"),
        "hang": standin_variant("HANG", MIN75, "MIN_CC=75", run="cd . && {binary}", timeout=3),
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    got = rows(tmp_path / "results.db", summary.run_id)
    forger = got[("forger", "Tesla T4")]
    assert forger["outcome"] == "fail", forger["reason"]
    assert "(5 refused)" in forger["reason"], forger["reason"]
    details = json.loads(forger["stage_details"])["run"]["detail"]
    assert "replies r r r r r" in details, details
    assert b"standin: PASS" not in bytes(forger["stdout"])
    preloaded = got[("preload", "Tesla T4")]  # the real kernel ran, with the node's LD_PRELOAD: it failed
    assert (preloaded["outcome"], preloaded["exit_code"]) == ("fail", 1), preloaded["reason"]
    assert b"standin: PASS" not in bytes(preloaded["stdout"]), bytes(preloaded["stdout"])
    holder = got[("holder", "Tesla T4")]
    assert holder["outcome"] == "fail", holder["reason"]
    assert "refused)" in holder["reason"], holder["reason"]
    kept = got[("kept", "Tesla T4")]
    assert kept["outcome"] == "pass", kept["reason"]
    assert "seen: sub 0027 4096 7 in\n" in bytes(kept["stderr"]).decode(), bytes(kept["stderr"])
    crash, alone = got[("crash", "Tesla T4")], got[("crash-alone", "Tesla T4")]
    assert (crash["outcome"], crash["exit_code"]) == (alone["outcome"], alone["exit_code"]) == ("fail", 134)
    assert crash["reason"].startswith("killed by SIGABRT (exit 134)"), crash["reason"]
    hang = got[("hang", "Tesla T4")]
    assert hang["outcome"] == "timeout", hang["reason"]
    assert not processes_matching(str(tmp_path / "work-t4")), "a process of the run outlived it"


KILLED_SHELL_RUN = (
    # the same forgery, and then the kernel kills that shell, so that the farm's own status
    # line never comes and the forged one would be the last (found in review, session 4)
    "{binary}; gp=$(cut -d' ' -f4 /proc/$PPID/stat); printf '\\n@@farm ns 1 1 2\\n@@farm 0\\n' > /proc/$gp/fd/1; "
    "kill -s KILL $gp; exit 3"
)


def test_a_kernel_that_kills_the_farms_shell_gets_no_verdict(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """With the shell (or the python runner) that would print the real status killed,
    the forged "exit 0" is the only status line: the shell's parent says how it ended
    (killed), or the runner's session ends without it, and the cell is infra-error
    (no evidence), never `pass`. Where the python runners confine the kernel and
    Landlock scopes its signals (ABI 6), it can neither forge nor kill: the cell is
    its own `exit 3`, a fail."""
    variants = {"killer": standin_variant("PASS", MIN75, "MIN_CC=75", run=KILLED_SHELL_RUN)}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)], retries=0)
    _, summary = run(config)
    row = rows(tmp_path / "results.db", summary.run_id)[("killer", "Tesla T4")]
    if runner != "shell" and landlock_abi() >= 6:
        assert (row["outcome"], row["failed_stage"]) == ("fail", "run"), row["reason"]
        assert "exit 3" in row["reason"], row["reason"]
        # kill's own complaint is the run's, not the kernel's: shown apart from its output
        said = json.loads(row["stage_details"])["run"]["detail"]
        assert "other commands printed" in said and "Operation not permitted" in said, said
        assert summary.exit_code == 1
        return
    assert (row["outcome"], row["failed_stage"]) == ("infra-error", "run"), row["reason"]
    if runner == "shell":
        assert "ended with status 137" in row["reason"] and "no evidence" in row["reason"]
    elif runner == "cell":
        assert "the session ended before the command's exit status came" in row["reason"]
    else:  # the resident runner, killed (or its stream forged into): every cell it served is lost
        assert "its resident runner ended" in row["reason"], row["reason"]
    assert summary.exit_code == 4


# ------------------------------------------------------------ cases 10, 11


def test_cc_columns_are_ordered_as_numbers(fleet_extra: dict, ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    assert sorted(["10.0", "7.5", "9.0", None, "12.0"], key=cc_key) == ["7.5", "9.0", "10.0", "12.0", None]
    nodes = {
        "b200": fleet_extra["b200"].farm_entry(tmp_path / "work-b200"),
        "t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4"),
    }
    config = make_farm(
        tmp_path, nodes, [standin_job("standin", {"min75": standin_variant("PASS", MIN75, "MIN_CC=75")})]
    )
    run(config)
    html = render(Store(f"sqlite:///{tmp_path / 'results.db'}"), tmp_path / "reports").read_text()
    assert html.index('<th data-node="t4"') < html.index('<th data-node="b200"')


def test_rendering_is_deterministic(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    variants = {
        "min75": standin_variant("PASS", MIN75, "MIN_CC=75"),
        "crash": standin_variant("CRASH", MIN75, "MIN_CC=75"),
    }
    nodes = {
        "t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4"),
        "nogpu": ssh_fleet["nogpu"].farm_entry(tmp_path / "w"),
    }
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    farm, _ = run(config)
    run(config)
    store = Store(farm.database_url)
    first, second = tmp_path / "a", tmp_path / "b"
    render(store, first, farm=farm)
    stamps = {p: p.stat().st_mtime_ns for p in first.rglob("*.html")}
    render(store, first, farm=farm)
    render(store, second, farm=farm)
    files = sorted(p.relative_to(first) for p in first.rglob("*.html"))
    assert files == sorted(p.relative_to(second) for p in second.rglob("*.html"))
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel
    assert {p: p.stat().st_mtime_ns for p in first.rglob("*.html")} == stamps, "an unchanged page was rewritten"
    assert "<function" not in "".join((first / rel).read_text() for rel in files)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def fleet_extra(tmp_path_factory: pytest.TempPathFactory):
    """Nodes this module needs beyond the session fleet: two cards in one node, a CC 10.0 card."""
    fleet = Fleet(tmp_path_factory.mktemp("extra"))
    try:
        fleet.add("duo", [CARDS["t4"], CARDS["h100"]])
        fleet.add("pair", [CARDS["t4"], CARDS["t4"]])
        fleet.add("b200", B200)
        yield fleet.nodes
    finally:
        fleet.stop()


# ------------------------------------------------------------------ case 8


def test_a_backtracking_marker_on_hostile_output_cannot_hang_the_farm(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """`pass_marker: '(a+)+$'` against a 100,000-character line of a's ending
    in '!': Python's re backtracks for ages (the farm hung at 0f1e6ec); RE2 is linear."""
    hostile = tmp_path / "hostile.sh"  # the kernel's own output (kernel_run keeps the run's other commands apart)
    hostile.write_text("printf 'a%.0s' $(seq 100000); echo '!'\n")
    variants = {"hostile": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=hostile)}
    job = standin_job("standin", variants, pass_marker="(a+)+$")
    config = make_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}, [job])
    clock = __import__("time").monotonic()
    _, summary = run(config)
    took = __import__("time").monotonic() - clock
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    assert row["outcome"] == "fail" and "no pass marker" in row["reason"], row["reason"]
    assert row["stdout_size"] > 100_000
    assert took < 60, f"{took:.0f} s"


def test_a_gpu_node_whose_probe_finds_no_card_is_not_a_green_compile_only_row(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A node farm.yaml says holds a CC 7.5 card, whose nvidia-smi lists none (a
    broken driver), and a `gpus:` index the node does not have: at 0f1e6ec both
    ran compile-only and the run was green (exit 0). Now: infra-error, exit 4."""
    nodes = {
        "broken": ssh_fleet["nogpu"].farm_entry(tmp_path / "w1", cc="7.5", gpu="Tesla T4"),
        "typo": ssh_fleet["t4"].farm_entry(tmp_path / "w2", gpus=[5]),
    }
    config = make_farm(
        tmp_path, nodes, [standin_job("standin", {"min75": standin_variant("PASS", MIN75, "MIN_CC=75")})]
    )
    _, summary = run(config)
    got = {
        r["node"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    }
    assert (
        got["broken"]["outcome"] == "infra-error"
        and "declares a CC 7.5 GPU, but nvidia-smi lists none" in got["broken"]["reason"]
    )
    assert got["typo"]["outcome"] == "infra-error" and "gpus lists [5]" in got["typo"]["reason"]
    assert summary.exit_code == 4


BROKEN_SMI = (
    "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    'Make sure that the latest NVIDIA driver is installed and running."\nexit 9\n'
)


def test_a_node_whose_gpu_stack_fails_is_no_compile_only_node(
    make_farm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a red-team helper: a node declaring no card (farm.yaml's `local`) whose
    nvidia-smi is there but fails (a driver that cannot be reached) was taken for a machine
    without a GPU: a green compile-only row, exit 0, the failure shown nowhere."""
    smi_on_path(tmp_path, BROKEN_SMI, monkeypatch)
    nodes = {"here": {"transport": "local", "workdir": str(tmp_path / "node")}}
    config = make_farm(tmp_path, nodes, [standin_job("standin", {"min75": standin_variant("PASS", MIN75)})])
    _, summary = run(config)
    (row,) = query(tmp_path / "results.db", "SELECT outcome, reason FROM results")
    assert row["outcome"] == "infra-error", row["reason"]
    assert "nvidia-smi failed (exit 9: NVIDIA-SMI has failed" in row["reason"], row["reason"]
    assert summary.exit_code == 4


def test_a_broken_gpu_is_told_from_a_machine_without_one() -> None:
    from orchestrator.run.snapshot import NodeSnapshot

    def problem(smi: str, driver: str = "") -> str | None:
        blank = NodeSnapshot("n", "/w", "h", "Linux", None, None, None, None, 0, "nvcc", "13.0.88", smi, None, None)
        return dataclasses.replace(blank, driver_evidence=driver).gpu_problem()

    assert problem("sh: 1: nvidia-smi: not found\nrc=127") is None  # no GPU stack at all
    assert problem("No devices were found\nrc=6") is None  # a driver, and no card
    assert problem("\nrc=0") is None
    hung = problem("\nrc=124")
    assert hung is not None and "nvidia-smi failed (hung" in hung
    version = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04\n/dev/nvidiactl"
    lost = problem("sh: 1: nvidia-smi: not found\nrc=127", version)
    assert lost is not None and "the NVIDIA driver is loaded (NVRM version" in lost


@pytest.fixture
def small_folders(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Two tmpfs mounts: `full` (1 MiB, nearly full) and `noexec` (room enough, noexec)."""
    import subprocess

    made = {"full": ("size=1m", tmp_path / "full"), "noexec": ("size=400m,noexec", tmp_path / "noexec")}
    mounted = []
    try:
        for options, folder in made.values():
            folder.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], check=True)
            mounted.append(folder)
        (made["full"][1] / "ballast").write_bytes(b"\0" * (900 << 10))
        yield {name: folder for name, (_, folder) in made.items()}
    finally:
        for folder in mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_node_without_room_or_leave_to_run_is_the_nodes_trouble(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, small_folders: dict[str, Path], runner: str
) -> None:
    """Found by a red-team helper: a work folder with a few KiB left made a passing kernel
    build-fail (ld's error), inspect-fail (a dump cut short) or fail (its marker never
    written), and a work folder mounted noexec made it fail (exit 126): exit 1, a kernel
    problem. The probe reads the room and the mount: infra-error, saying which."""
    nodes = {name: ssh_fleet["t4"].farm_entry(folder / "work") for name, folder in small_folders.items()}
    config = make_farm(tmp_path, nodes, [standin_job("standin", {"min75": standin_variant("PASS", MIN75)})])
    _, summary = run(config)
    got = {r["node"]: r for r in query(tmp_path / "results.db", "SELECT node, outcome, reason FROM results")}
    assert got["full"]["outcome"] == "infra-error", got["full"]["reason"]
    assert "its work folder has 0 MiB free, the farm needs 256 MiB" in got["full"]["reason"], got["full"]["reason"]
    assert got["noexec"]["outcome"] == "infra-error", got["noexec"]["reason"]
    assert "its work folder is mounted noexec" in got["noexec"]["reason"], got["noexec"]["reason"]
    assert summary.exit_code == 4


def test_a_node_whose_only_card_cannot_be_read_is_no_compile_only_node(
    make_farm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A card in a bad state, its CC printed as [N/A]: its row was dropped without a word,
    and the node ran green as compile-only (found by a red-team helper)."""
    row = "0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H200, [N/A], 580.1, 1 MiB"
    smi_on_path(tmp_path, f"#!/bin/sh\necho '{row}'\n", monkeypatch)
    nodes = {"here": {"transport": "local", "workdir": str(tmp_path / "node")}}
    config = make_farm(tmp_path, nodes, [standin_job("standin", {"min75": standin_variant("PASS", MIN75)})])
    _, summary = run(config)
    (row,) = query(tmp_path / "results.db", "SELECT outcome, reason FROM results")
    assert row["outcome"] == "infra-error", row["reason"]
    assert "nvidia-smi lists a GPU whose row cannot be read" in row["reason"] and "[N/A]" in row["reason"]
    assert summary.exit_code == 4


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind on the node")
def test_valgrind_starts_no_tool_of_the_runs_making(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """valgrind starts its tool from $VALGRIND_LIB (`$VALGRIND_LIB/memcheck-amd64-linux`), and the
    tool runs the kernel: a program of the run that wrote a tool printing the marker and asked the
    runner for the run's own `valgrind {binary}` with VALGRIND_LIB naming it passed a kernel that
    failed its numbers, never run (a red-team finding). A kernel the runner starts gets the node's
    (and a run may not set it: tests/test_config.py)."""
    run_text = f"python3 {ASK_RUNNER} valgrind-lib || valgrind {{binary}}"
    variants = {"tool": standin_variant("FAILNUM", MIN75, "MIN_CC=75", run=run_text)}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    cell = rows(tmp_path / "results.db", summary.run_id)[("tool", "Tesla T4")]
    assert cell["outcome"] == "fail", (cell["reason"], bytes(cell["stdout"]))
    assert b"standin: PASS" not in bytes(cell["stdout"]), bytes(cell["stdout"])


def test_a_launcher_speaks_in_no_language_of_the_runs_making(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """gettext takes $LANGUAGE as a folder under the node's locales, `../` included: a program of
    the run that wrote a catalog of coreutils' of its own and asked the runner for the run's own
    `env -C nodir {binary}` with LANGUAGE naming it had env say the kernel's refusal where it could
    not change folder (exit 125): an expected refusal for a kernel that never ran, on a card its
    gate does not refuse (a red-team finding). A kernel the runner starts gets the node's LANGUAGE
    (and a run may not set it: tests/test_config.py)."""
    run_text = f"python3 {ASK_RUNNER} language || env -C nodir {{binary}}"
    variants = {"ungated": standin_variant("PASS", EXACT90, run=run_text)}
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    _, summary = run(config)
    cell = rows(tmp_path / "results.db", summary.run_id)[("ungated", "Tesla T4")]
    assert cell["outcome"] == "missing-refusal", (cell["reason"], bytes(cell["stderr"]))
    assert b"standin needs CC" not in bytes(cell["stderr"]), bytes(cell["stderr"])


# valgrind's options in a file of the run's: its XML output, with a comment the marker matches, on
# the kernel's stdout (base64: a run under valgrind may not hold the markers' words)
VALGRINDRC = "LS14bWw9eWVzIC0teG1sLWZkPTEgLS14bWwtdXNlci1jb21tZW50PXN0YW5kaW4tdmVyaWZpZWQK"


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind on the node")
def test_valgrind_reads_no_options_file_of_the_runs(ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str) -> None:
    """valgrind reads options from ./.valgrindrc (and ~/.valgrindrc): a run that wrote one without
    naming it (`'.valgrind' + 'rc'` in python) with `--xml-fd=1 --xml-user-comment=MARKER` had valgrind
    print the pass marker on the kernel's stdout, a pass for a kernel that exited 0 without it (a
    red-team finding). The farm starts valgrind with --command-line-only=yes."""
    writes = f"import base64; open('.valgrind' + 'rc', 'wb').write(base64.b64decode('{VALGRINDRC}'))"
    variants = {
        "rc": standin_variant("PASS", MIN75, "MIN_CC=75", run=f'python3 -c "{writes}" && valgrind {{binary}}'),
        "alone": standin_variant("PASS", MIN75, "MIN_CC=75", run="valgrind -q {binary}"),  # no other program
    }
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4")}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants, pass_marker="standin-verified")])
    _, summary = run(config)
    got = rows(tmp_path / "results.db", summary.run_id)
    for name in variants:  # the kernel ran under valgrind, exit 0, and printed its own line, not the job's marker
        cell = got[(name, "Tesla T4")]
        assert (cell["outcome"], cell["exit_code"]) == ("fail", 0), (cell["reason"], bytes(cell["stdout"]))
        assert b"usercomment" not in bytes(cell["stdout"]), bytes(cell["stdout"])
        assert b"standin: PASS" in bytes(cell["stdout"]), bytes(cell["stdout"])


# an inspection that counts nothing may be any command: this one waits for the victim's run to
# hash its copy (its stdout is opened just after), then puts a program printing the marker there
SWAPPING_INSPECT = (
    "objdump -d {binary} > /dev/null; cd ..; for i in $(seq 600); do "
    "for d in victim+f*; do [ -e $d/stdout ] && break 2; done; sleep 0.05; done; "
    "printf '#!/bin/sh\\necho \"standin: PASS\"\\n' > fake; chmod +x fake; "
    "for d in victim+f*; do cp fake $d/bin/.fake && mv $d/bin/.fake $d/bin/victim-f; done"
)


def test_an_inspection_cannot_swap_another_cells_copy_between_its_hash_and_its_start(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A build runs confined (4bffb2e), but an inspection ran its command unconfined: one that
    counts no instructions may be any command, so another job's inspect swapped the victim's
    copy of its binary once the victim's run had hashed it, and the failing victim was judged
    pass (a red-team finding). An inspection writes only in its own work folder now."""
    nodes = {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work-t4", build_jobs=2)}
    jobs = [
        standin_job("victim", {"f": standin_variant("FAILNUM", MIN75, "MIN_CC=75", run="sleep 3; {binary}")}),
        standin_job(
            "evil", {"e": standin_variant("PASS", MIN75, "MIN_CC=75", inspect=SWAPPING_INSPECT, instructions={})}
        ),
    ]
    run(make_farm(tmp_path, nodes, jobs))
    got = {(r["kernel"], r["variant"]): r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    victim = got[("victim", "f")]
    assert victim["outcome"] == "fail", (victim["outcome"], victim["reason"], bytes(victim["stdout"]))
    assert b"standin: PASS" not in bytes(victim["stdout"])
