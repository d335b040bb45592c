"""The sanitize stage (issue 12, part 2): a kernel whose numbers come out right
over a race or an out-of-bounds write is not a pass.

On this machine (no GPU) the nodes are real sshd nodes with a stand-in T4 and
a stand-in compute-sanitizer (tests/nodes.py), the stand-in GPU's tool: it
takes the real tool's options and writes its log format. The real tool, on
real kernels (tests/sanitize/*.cu), runs in the `gpu`-marked test at the end,
on the lent H200; bench/sanitize-h200.sh runs it there through the farm over SSH.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, install_sanitizer, processes_matching, query, standin_job, standin_variant

from docs import readme_yaml
from orchestrator.classify import Evidence, classify
from orchestrator.classify.sanitizer_report import SanitizerReport
from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigErrors
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation, plan_cells
from orchestrator.report.site import render
from orchestrator.run import sanitize
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store

MIN75 = {"min": "7.5"}
PASS = Expectation(Outcome.PASS, "a CC 7.5 card, contract CC >= 7.5", None, None)
HERE = Path(__file__).resolve().parent

# compute-sanitizer 2025.x's own words (memcheck and racecheck), as the tools print them
MEMCHECK_LOG = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at fill(int *, int)+0x70 in /tmp/oob.cu:9
=========     by thread (232,0,0) in block (3,0,0)
=========     Access at 0x7f3c00000fa0 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""
RACECHECK_LOG = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at block_sum(const int *, int *)+0x90 in /tmp/race.cu:9
=========     and Read access at block_sum(const int *, int *)+0x1d0 in /tmp/race.cu:14 [1020 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    nodes = Fleet(tmp_path_factory.mktemp("sanitize-fleet"))
    try:
        install_sanitizer(nodes.add("t4san", CARDS["t4"], start=False))
        nodes["t4san"].start()
        nodes.add("t4bare", CARDS["t4"])
        yield nodes
    finally:
        nodes.stop()


def run(config: Path):
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, plan_cells(farm), cache_dir=config.parent / "archives")
    finally:
        store.close()
    return summary


def results(db: Path, run_id: int) -> dict[str, sqlite3.Row]:
    return {r["variant"]: r for r in query(db, "SELECT * FROM results WHERE run_id = ?", run_id)}


# ------------------------------------------------------------------ reading the tool


def test_the_tools_own_words_are_read() -> None:
    memcheck = sanitize.report("memcheck", sanitize.SANITIZER_EXIT, False, MEMCHECK_LOG.encode())
    assert isinstance(memcheck, SanitizerReport) and memcheck.errors == 1 and not memcheck.clean
    assert memcheck.findings.splitlines()[0] == "Invalid __global__ write of size 4 bytes"
    race = sanitize.report("racecheck", sanitize.SANITIZER_EXIT, False, RACECHECK_LOG.encode())
    assert isinstance(race, SanitizerReport) and race.errors == 1
    assert "Race reported between Write access" in race.findings
    clean = sanitize.report("initcheck", 0, False, b"========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    assert isinstance(clean, SanitizerReport) and clean.clean and clean.findings == ""


def test_a_forged_summary_is_not_the_tools_word() -> None:
    # the kernel wrote a clean summary into the log while it ran; the tool's own comes last
    forged = "========= ERROR SUMMARY: 0 errors\n" + MEMCHECK_LOG
    got = sanitize.report("memcheck", sanitize.SANITIZER_EXIT, False, forged.encode())
    assert isinstance(got, SanitizerReport) and got.errors == 1
    # a log cut short: the exit code still says errors were found
    cut = sanitize.report("memcheck", sanitize.SANITIZER_EXIT, False, b"========= COMPUTE-SANITIZER\n")
    assert isinstance(cut, SanitizerReport) and cut.errors == 1 and not cut.clean
    # the summary says 0 but the tool exited with its error code: the code wins
    lying = sanitize.report("memcheck", sanitize.SANITIZER_EXIT, False, b"========= ERROR SUMMARY: 0 errors\n")
    assert isinstance(lying, SanitizerReport) and lying.errors == 1
    # it started, and was killed (by the kernel) before its summary: not clean, and not the node's fault
    killed = sanitize.report("memcheck", 137, False, b"========= COMPUTE-SANITIZER\n")
    assert isinstance(killed, SanitizerReport) and not killed.finished and not killed.clean
    verdict = classify(Evidence(build_exit=0, inspect_exit=0, run_exit=0, pass_line=1, sanitizer=(killed,)), PASS)
    assert verdict.outcome is Outcome.SANITIZER_ERROR and "did not finish" in verdict.reason
    # it never started checking (no banner): the tool's or the node's failure, no verdict
    none = sanitize.report("memcheck", 0, False, b"Error: Device not supported\n")
    assert isinstance(none, str) and "without its summary" in none and "Device not supported" in none


def test_classify_judges_a_pass_by_its_sanitizer_runs() -> None:
    from orchestrator.plan import Expectation

    exp = Expectation(Outcome.PASS, "a CC 7.5 card, contract CC >= 7.5", None, None)
    passed = dict(build_exit=0, inspect_exit=0, run_exit=0, pass_line=3)
    race = SanitizerReport("racecheck", 86, 1, "Error: Race reported between Write access ...")
    rows = [
        ((), Outcome.PASS, None),
        ((SanitizerReport("memcheck", 0, 0),), Outcome.PASS, None),
        ((race,), Outcome.SANITIZER_ERROR, "sanitize"),
        ((SanitizerReport("memcheck", 3, 0),), Outcome.SANITIZER_ERROR, "sanitize"),  # failed under the tool
        ((SanitizerReport("racecheck", 124, 0, timed_out=True),), Outcome.TIMEOUT, "sanitize"),
    ]
    for reports, outcome, stage in rows:
        verdict = classify(Evidence(**passed, sanitizer=reports), exp)
        assert (verdict.outcome, verdict.failed_stage) == (outcome, stage), (reports, verdict)
    verdict = classify(Evidence(**passed, sanitizer=(race,)), exp)
    assert verdict.reason == "compute-sanitizer: racecheck: 1 error (Error: Race reported between Write access ...)"
    # a failed run is judged on its failure, whatever the tools said
    failed = classify(Evidence(build_exit=0, inspect_exit=0, run_exit=1, sanitizer=(race,)), exp)
    assert failed.outcome is Outcome.FAIL


def test_a_sanitized_run_is_the_binary_alone(make_farm, tmp_path: Path) -> None:
    """The tool wraps the run command: "true && {binary}" would run the binary unchecked."""
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"], run="true && {binary}")
    config = make_farm(tmp_path, {"here": {"transport": "local"}}, [standin_job("standin", {"v": variant})])
    with pytest.raises(ConfigErrors) as err:
        load_farm(config)
    assert "variants.v" in str(err.value) and "a sanitized run must be the binary and plain arguments" in str(err.value)


def test_sanitize_is_validated(make_farm, tmp_path: Path) -> None:
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck", "leakcheck", "memcheck"])
    config = make_farm(tmp_path, {"here": {"transport": "local"}}, [standin_job("standin", {"v": variant})])
    with pytest.raises(ConfigErrors) as err:
        load_farm(config)
    text = str(err.value)
    assert "variants.v.sanitize" in text and "memcheck" in text and "leakcheck" in text


# ------------------------------------------------------------------ through the farm


def readme_example() -> dict:
    """The README's sanitize example (a job's variants and its sanitize_timeout)."""
    return readme_yaml("What the numbers hide: the sanitize stage")


def test_the_readmes_example_runs(fleet, make_farm, tmp_path: Path) -> None:
    """The README's example as written (its variant's tools and the job's
    sanitize_timeout), on the stand-in T4: a clean stand-in passes both tools."""
    example = readme_example()
    (name, documented), *_ = example["variants"].items()
    assert documented["sanitize"] == ["memcheck", "racecheck"] and example["sanitize_timeout"] == 600
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=documented["sanitize"])
    job = standin_job("standin", {name: variant}, sanitize_timeout=example["sanitize_timeout"])
    nodes = {"t4san": fleet["t4san"].farm_entry(tmp_path / "work", build_jobs=1)}
    summary = run(make_farm(tmp_path, nodes, [job]))
    row = results(tmp_path / "results.db", summary.run_id)[name]
    assert row["outcome"] == "pass"
    import json

    assert [t["tool"] for t in json.loads(row["sanitizer"])] == ["memcheck", "racecheck"]


def test_a_pass_that_hides_a_race_or_a_stray_write_is_a_sanitizer_error(fleet, make_farm, tmp_path: Path) -> None:
    variants = {
        "clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck", "racecheck", "synccheck"]),
        "race": standin_variant("RACE", MIN75, "MIN_CC=75", sanitize=["memcheck", "racecheck"]),
        "oob": standin_variant("OOB", MIN75, "MIN_CC=75", sanitize=["memcheck", "initcheck"]),
        "oob-unchecked": standin_variant("OOB", MIN75, "MIN_CC=75"),  # what the numbers alone say
        "refused": standin_variant("PASS", {"exactly": "9.0"}, "EXACT_CC=90", sanitize=["memcheck"]),
        "wrong": standin_variant("FAILNUM", MIN75, "MIN_CC=75", sanitize=["memcheck"]),
    }
    nodes = {"t4san": fleet["t4san"].farm_entry(tmp_path / "work", build_jobs=2)}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    summary = run(config)
    got = results(tmp_path / "results.db", summary.run_id)
    assert {v: r["outcome"] for v, r in got.items()} == {
        "clean": "pass",
        "race": "sanitizer-error",
        "oob": "sanitizer-error",
        "oob-unchecked": "pass",
        "refused": "expected-refusal",
        "wrong": "fail",
    }
    assert summary.exit_code == 1
    import json

    stages = {v: json.loads(r["stage_details"]) for v, r in got.items()}
    assert stages["clean"]["sanitize"]["status"] == "ok"
    for skipped in ("oob-unchecked", "refused", "wrong"):  # only a pass is checked again
        assert "sanitize" not in stages[skipped], skipped
    clean = json.loads(got["clean"]["sanitizer"])
    assert [(t["tool"], t["errors"], t["exit_code"]) for t in clean] == [
        ("memcheck", 0, 0),
        ("racecheck", 0, 0),
        ("synccheck", 0, 0),
    ]
    race = got["race"]
    assert race["failed_stage"] == "sanitize"
    assert race["reason"].startswith("compute-sanitizer: racecheck: 1 error (Error: Race reported between Write")
    reports = {t["tool"]: t for t in json.loads(race["sanitizer"])}
    assert reports["memcheck"]["errors"] == 0 and reports["racecheck"]["exit_code"] == sanitize.SANITIZER_EXIT
    oob = json.loads(got["oob"]["sanitizer"])
    assert oob[0]["findings"].startswith("Invalid __global__ write of size 4 bytes\nat fill(int *, int)")
    # the cell's folder is gone once the tools ran
    assert not list((tmp_path / "work" / "runs").glob("*/*/*")) if (tmp_path / "work" / "runs").exists() else True
    # the cell page shows each tool and its findings; the index names the outcome
    out = tmp_path / "site"
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        render(store, out)
    finally:
        store.close()
    page = (out / "cells" / f"{race['id']}.html").read_text()
    assert 'id="sanitizer"' in page and 'data-tool="racecheck"' in page and "Race reported between" in page
    assert "sanitizer-error" in (out / "index.html").read_text()


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_kernel_that_removes_its_copy_is_still_checked_and_retires_no_node(
    fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """A red-team helper's: a kernel may write its work folder, so it may remove its own copy
    while it runs; the sanitize stage then found no copy, an infra-error retried until the node
    was marked unhealthy (every later cell on it skipped). Each tool now runs a fresh copy of
    the build (hashed as before), and the cell is judged on what the tools found."""
    prelude = tmp_path / "prelude.sh"
    prelude.write_text("rm -f ../bin/standin-selfdel\n")  # the kernel's own doing (unconfined: the shell runner)
    variants = {
        "selfdel": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude, sanitize=["memcheck", "racecheck"])
    }
    nodes = {"t4san": fleet["t4san"].farm_entry(tmp_path / "work", build_jobs=1, runner=runner)}
    summary = run(make_farm(tmp_path, nodes, [standin_job("standin", variants)]))
    row = results(tmp_path / "results.db", summary.run_id)["selfdel"]
    assert row["outcome"] == "pass", row["reason"]
    assert [t["tool"] for t in json.loads(row["sanitizer"])] == ["memcheck", "racecheck"]
    attempts = query(tmp_path / "results.db", "SELECT status FROM attempts WHERE kernel IS NOT NULL")
    assert [a["status"] for a in attempts] == ["ok"]


def test_a_node_without_the_tool_cannot_give_a_clean_bill(fleet, make_farm, tmp_path: Path) -> None:
    variants = {"clean": standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"])}
    nodes = {"t4bare": fleet["t4bare"].farm_entry(tmp_path / "work", build_jobs=1)}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants)])
    summary = run(config)
    row = results(tmp_path / "results.db", summary.run_id)["clean"]
    assert (row["outcome"], row["failed_stage"]) == ("infra-error", "sanitize")
    assert "no compute-sanitizer" in row["reason"] and "compute_sanitizer" in row["reason"]
    assert summary.exit_code == 4
    # named in farm.yaml, the node's tool is used
    tool = install_sanitizer(fleet["t4san"])  # the same stand-in, outside the bare node's PATH
    nodes["t4bare"]["compute_sanitizer"] = str(tool)
    config = make_farm(tmp_path / "named", nodes, [standin_job("standin", variants)])
    summary = run(config)
    assert results(tmp_path / "named" / "results.db", summary.run_id)["clean"]["outcome"] == "pass"


def test_a_tool_that_never_ends_is_killed_at_its_own_timeout(fleet, make_farm, tmp_path: Path) -> None:
    variants = {"slow": standin_variant("SLOWSAN", MIN75, "MIN_CC=75", sanitize=["racecheck"])}
    nodes = {"t4san": fleet["t4san"].farm_entry(tmp_path / "work", build_jobs=1)}
    config = make_farm(tmp_path, nodes, [standin_job("standin", variants, sanitize_timeout=1)])
    summary = run(config)
    row = results(tmp_path / "results.db", summary.run_id)["slow"]
    assert (row["outcome"], row["failed_stage"]) == ("timeout", "sanitize")
    assert "sanitize_timeout" in row["reason"]
    assert not processes_matching(str(tmp_path / "work")), "the kernel outlived its sanitizer run"


# ------------------------------------------------------------------ the real tool


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a GPU")
def test_gpu_the_real_tool_finds_the_planted_bugs(tmp_path: Path) -> None:
    """On the lent H200: real compute-sanitizer on tests/sanitize/*.cu through
    the farm (local transport): race and oob pass their numbers and are
    sanitizer-error; clean passes every tool."""
    tool = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    (tmp_path / "kernels").mkdir()
    (tmp_path / "jobs").mkdir()
    for name, tools in [
        ("race", ["racecheck"]),
        ("oob", ["memcheck"]),
        ("clean", ["memcheck", "racecheck", "synccheck", "initcheck"]),
    ]:
        shutil.copy(HERE / "sanitize" / f"{name}.cu", tmp_path / "kernels" / f"{name}.cu")
        (tmp_path / "jobs" / f"{name}.yaml").write_text(
            f"kernel: {name}\nsources: [kernels/{name}.cu]\npass_marker: 'PASS'\n"
            "refusal_marker: 'needs compute capability'\nvariants:\n  sm75:\n"
            "    build: '{nvcc} -std=c++17 -O3 -arch=sm_75 -o {binary} {sources}'\n"
            f"    cc: {{min: '7.5'}}\n    sanitize: [{', '.join(tools)}]\n"
        )
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    (tmp_path / "farm.yaml").write_text(
        "database: sqlite:///results.db\nnodes:\n  here:\n    transport: local\n"
        f"    nvcc: {nvcc}\n    compute_sanitizer: {tool}\n    workdir: {tmp_path / 'work'}\n"
    )
    summary = run(tmp_path / "farm.yaml")
    got = {
        r["kernel"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    }
    for kernel, row in got.items():
        print(f"{kernel}: {row['outcome']} ({row['reason']}); sanitizer {row['sanitizer']}")
    assert {k: r["outcome"] for k, r in got.items()} == {
        "race": "sanitizer-error",
        "oob": "sanitizer-error",
        "clean": "pass",
    }
    assert "racecheck" in got["race"]["reason"] and "memcheck" in got["oob"]["reason"]
    # the real tool works confined (the lent H200's kernel has Landlock), its workdir under /tmp
    for kernel, row in got.items():
        print(f"{kernel}: sanitize stage {json.loads(row['stage_details'])['sanitize']}")
        assert "unconfined" not in json.loads(row["stage_details"])["sanitize"]["detail"], kernel


def test_a_certificate_whose_bytes_a_sanitizer_now_faults_is_flagged(tmp_path: Path) -> None:
    """The committed H200 evidence certifies wgmma_gemm on CC 9.0. A later run of
    the same inputs on real hardware that is sanitizer-error (written here from
    the last certifying row, its outcome changed: there is no GPU in CI) keeps
    the certificate, and the ledger says what the sanitizer found, on the index
    and the kernel's page."""
    import datetime
    import json

    from orchestrator.store.records import ResultRecord
    from orchestrator.store.tables import ResultRow

    db = tmp_path / "results.db"
    shutil.copyfile(HERE.parent / "results.db", db)
    (last,) = query(
        db, "SELECT * FROM results WHERE kernel = 'wgmma_gemm' AND variant = 'gencode' ORDER BY id DESC LIMIT 1"
    )
    last = dict(last)
    assert last["outcome"] == "pass" and last["real_gpu"] and last["identity"]
    store = Store(f"sqlite:///{db}")
    try:
        run_id = store.begin_run(
            token="t", trigger="test", farm_commit=None, farm_version="0", host="h", config_file="f", selection="s"
        )
        fields = {}
        for column in ResultRow.__table__.columns:
            if column.key in ("id", "run_id") or column.key not in last:  # newer than the shipped file: defaulted
                continue
            value = last.get(column.key)
            if str(column.type) == "JSON" and isinstance(value, str):
                value = json.loads(value)
            if "DATETIME" in str(column.type) and value is not None:
                value = datetime.datetime.now(datetime.UTC)
            fields[column.key] = value
        fields.update(
            outcome="sanitizer-error",
            failed_stage="sanitize",
            reason="compute-sanitizer: racecheck: 1 error (Error: Race reported between Write access at ...)",
        )
        store.add_result(ResultRecord(run_id=run_id, **fields))
        store.finish_run(run_id, "finished", 1)
        render(store, tmp_path / "site")
    finally:
        store.close()
    page = (tmp_path / "site" / "kernels" / "wgmma_gemm.html").read_text()
    assert 'data-flag="sanitizer-error"' in page and "compute-sanitizer now finds errors" in page
    assert "VERIFIED" in page  # the certificate stands: its pass is on record
    assert 'data-flag="sanitizer-error"' not in (tmp_path / "site" / "kernels" / "cutlass_gemm.html").read_text()


@pytest.mark.parametrize(
    "case",
    [
        "configured",
        "on PATH",
        "beside an absolute nvcc",
        "beside an nvcc on PATH",
        "beside nothing",
        "shipped toolkit, one on PATH",
        "shipped toolkit, none on PATH",
    ],
)
def test_the_python_and_shell_runners_find_one_compute_sanitizer(tmp_path: Path, monkeypatch, case: str) -> None:
    """The python runner (noderunner.sanitizer) and the shell scripts (sanitize.locate)
    find the node's compute-sanitizer by one rule, written twice: farm.yaml's path;
    else PATH's; else the one beside nvcc, never beside a toolkit the farm shipped into
    its work folder (a kernel could have put one there). Each case, both ways."""
    from orchestrator.run import noderunner

    def tool(folder: Path, name: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
        return folder / name

    workdir = tmp_path / "work"
    cuda, elsewhere, shipped = tmp_path / "cuda" / "bin", tmp_path / "path-bin", workdir / "toolkits" / "t" / "bin"
    nvcc = str(tool(cuda, "nvcc"))
    configured = None
    path = [str(tmp_path / "empty")]
    if case == "configured":
        configured = str(tool(tmp_path / "opt", "compute-sanitizer"))
        tool(cuda, "compute-sanitizer")
    elif case == "on PATH":
        tool(elsewhere, "compute-sanitizer")
        tool(cuda, "compute-sanitizer")
        path.append(str(elsewhere))
    elif case == "beside an absolute nvcc":
        tool(cuda, "compute-sanitizer")
    elif case == "beside an nvcc on PATH":
        tool(cuda, "compute-sanitizer")
        path.append(str(cuda))
        nvcc = "nvcc"
    elif case.startswith("shipped toolkit"):
        nvcc = str(tool(shipped, "nvcc"))
        tool(shipped, "compute-sanitizer")  # a kernel may have written this one
        if case == "shipped toolkit, one on PATH":
            tool(elsewhere, "compute-sanitizer")
            path.append(str(elsewhere))
    search = ":".join([*path, "/usr/bin", "/bin"])

    shell = subprocess.run(
        ["sh", "-c", sanitize.locate(configured, nvcc, str(workdir)) + '; printf "found %s\\n" "$san"'],
        capture_output=True,
        text=True,
        env={"PATH": search},
        check=True,
    ).stdout.strip()
    monkeypatch.setattr(noderunner, "LOGIN_ENV", {"PATH": search})
    san = noderunner.sanitizer({"configured": configured, "nvcc": nvcc, "workdir": str(workdir)})
    usable = bool(san) and os.path.isfile(san) and os.access(san, os.X_OK)
    python = (f"found {san}" if usable else f"@@farm no-sanitizer {san}").strip()
    assert python == shell
    expected = {
        "configured": f"found {configured}",
        "on PATH": f"found {elsewhere}/compute-sanitizer",
        "beside an absolute nvcc": f"found {cuda}/compute-sanitizer",
        "beside an nvcc on PATH": f"found {cuda}/compute-sanitizer",
        "beside nothing": f"@@farm no-sanitizer {cuda}/compute-sanitizer",
        "shipped toolkit, one on PATH": f"found {elsewhere}/compute-sanitizer",
        "shipped toolkit, none on PATH": "@@farm no-sanitizer",
    }[case]
    assert shell == expected


def test_the_tool_runs_the_kernels_command_not_the_runs_preparations() -> None:
    """`cd data && {binary} 5` put `cd` under compute-sanitizer (which cannot start a shell
    builtin), so such a variant's sanitize stage never checked its kernel."""
    from orchestrator.run.sanitize import tool_command

    command = tool_command("memcheck", "/r", "cd data && X=1 {binary} 5", "/r/work/k")
    assert command.startswith('cd data && X=1 "$FARM_SANITIZER" --tool memcheck ')
    assert command.endswith("--log-file /r/sanitize-memcheck.log /r/work/k 5")
