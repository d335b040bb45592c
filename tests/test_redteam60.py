"""Red-team round 60: the farm's outputs as their consumers read them. A JUnit file
whose testcases CI tools merge (two cells under one classname once dots are package
separators), a kernel's output that a CI runner takes for its own workflow commands
(`::add-mask::`, `##[...]`, `##vso[...]`) when an export or a farm line reaches its log,
and a run hung up on (SIGHUP: its ssh session closed) that left its kernels running and
the run marked running until the next."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from farm_cli import farm_argv
from faults import faults_job, faults_variant, wait_for
from faults import write_fault_farm as write_farm
from nodes import CARDS, Fleet, nvidia_smi_script, query, smi_on_path
from test_faults import MIN75, cli_env, kernel_running, results
from toyfarm import TOY_SOURCE, toy_farm

from orchestrator.cli import main
from orchestrator.errors import EXIT_INFRA, EXIT_OK
from orchestrator.terminal import printable

# what a CI runner reads as a command of its own: GitHub Actions' `::name::` at a line's
# start (after whitespace) and its older `##[name]` anywhere in a line; Azure Pipelines' `##vso[`
COMMANDS = [
    "::add-mask::1",
    "  ::error file=kernels/toy.cpp,line=1::all good",
    "::stop-commands::farm",
    "note ##[add-mask]0",
    "##vso[task.complete result=Succeeded;]done",
]


def ci_commands(text: str) -> list[str]:
    """The lines of `text` a GitHub Actions or Azure Pipelines runner would act on."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::") or re.search(r"##(vso)?\[", line)]


def two_kernels_one_dotted_name(root: Path) -> Path:
    """The toy farm with kernel `a` variant `b.c` and kernel `a.b` variant `c` (names may hold dots)."""
    config = toy_farm(root)
    job = (root / "jobs" / "toy.yaml").read_text()
    (root / "jobs" / "toy.yaml").unlink()
    (root / "jobs" / "a.yaml").write_text(job.replace("kernel: toy", "kernel: a").replace("  plain:", "  b.c:"))
    (root / "jobs" / "a.b.yaml").write_text(job.replace("kernel: toy", "kernel: a.b").replace("  plain:", "  c:"))
    return config


def test_two_cells_never_share_a_junit_testcase_identity(tmp_path: Path) -> None:
    """Kernel `a` variant `b.c` and kernel `a.b` variant `c` were both testcase classname
    `a.b.c`, name `here`: Jenkins and the GitHub JUnit reporters key a testcase by them (a dot
    is a package separator), so one cell's result stood for both, or replaced the other's."""
    config = two_kernels_one_dotted_name(tmp_path / "farm")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == EXIT_OK
    done = cli.invoke(main, ["report", "--format", "junit", "--config", str(config)])
    assert done.exit_code == EXIT_OK, done.output
    cases = [(c.get("classname"), c.get("name")) for c in ET.fromstring(done.output).iter("testcase")]
    assert len(cases) == 2 and len(set(cases)) == 2, cases
    # the undotted names keep their classname KERNEL.VARIANT
    plain = two_kernels_one_dotted_name(tmp_path / "plain")
    (plain.parent / "jobs" / "a.yaml").write_text((plain.parent / "jobs" / "a.yaml").read_text().replace("b.c:", "bc:"))
    (plain.parent / "jobs" / "a.b.yaml").unlink()
    assert cli.invoke(main, ["verify", "--all", "--config", str(plain)]).exit_code == EXIT_OK
    out = cli.invoke(main, ["report", "--format", "junit", "--config", str(plain)]).output
    assert [c.get("classname") for c in ET.fromstring(out).iter("testcase")] == ["a.bc"], out


def kernel_printing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> tuple[Path, CliRunner]:
    """The toy farm on a stand-in T4 whose kernel prints `lines` (to stdout and stderr) before its marker."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    said = "".join(line + "\\n" for line in lines)
    source = TOY_SOURCE.replace(
        'std::printf("toy: PASS\\n");',
        f'std::printf("{said}"); std::fprintf(stderr, "{said}"); std::printf("toy: PASS\\n");',
    ).replace("#include <cstdio>", "#include <cstdio>")
    config = toy_farm(tmp_path / "farm", source=source)
    return config, CliRunner()


def test_a_kernels_ci_workflow_commands_are_inert_in_the_junit_and_json_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel printed `::add-mask::1` and `##vso[task.complete result=Succeeded;]`: the JUnit
    export (to stdout, as a CI step runs it) carried them at a line's start in <system-out>,
    where GitHub Actions masks every "1" of the log after it (the failure counts) and Azure
    Pipelines marks the step succeeded. They are character references now: the same text to a
    JUnit parser, no command to the runner."""
    config, cli = kernel_printing(tmp_path, monkeypatch, COMMANDS)
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == EXIT_OK
    done = cli.invoke(main, ["report", "--format", "junit", "--config", str(config)])
    assert done.exit_code == EXIT_OK
    assert ci_commands(done.output) == [], done.output
    (case,) = ET.fromstring(done.output).iter("testcase")
    said = "".join(line + "\n" for line in COMMANDS)
    assert case.findtext("system-out") == said + "toy: PASS\n"  # the parser reads the kernel's bytes
    assert case.findtext("system-err") == said
    exported = cli.invoke(main, ["report", "--format", "json", "--config", str(config)]).output
    assert ci_commands(exported) == [] and json.loads(exported)["cells"][0]["outcome"] == "pass"


def test_a_kernels_ci_workflow_commands_are_inert_in_what_farm_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`farm show` and the verdict lines of `farm verify` (a CI job's log) quote a kernel's
    output: `##[add-mask]` and `##vso[` act anywhere in a line, `::` at a line's start."""
    for line in COMMANDS:
        assert ci_commands(printable(line)) == [], printable(line)
    assert printable("a ## [not a command] std::vector") == "a ## [not a command] std::vector"
    config, cli = kernel_printing(tmp_path, monkeypatch, COMMANDS)
    job = config.parent / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("pass_marker: 'toy: PASS'", "pass_marker: 'toy: NEVER'"))
    done = cli.invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code != EXIT_OK and ci_commands(done.output) == [], done.output
    shown = cli.invoke(main, ["show", "1", "--config", str(config)])
    assert shown.output.count("add-mask") == 4 and ci_commands(shown.output) == [], shown.output


def start_slow(ssh_fleet: Fleet, tmp_path: Path, slow_s: int, nohup: bool) -> tuple[Path, subprocess.Popen, Path]:
    """`farm verify` of a quick and a slow cell on t4, returned once the slow kernel runs (under
    `nohup`: SIGHUP ignored, as a run meant to outlive its session is started)."""
    workdir = tmp_path / "work-t4"
    variants = {
        "quick": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0"),
        "slow": faults_variant("SLOWPASS", MIN75, f"SLEEP_S={slow_s}", timeout=slow_s + 60),
    }
    config = write_farm(tmp_path, {"t4": ssh_fleet["t4"].farm_entry(workdir, build_jobs=1)}, [faults_job(variants)])
    log = tmp_path / "farm.log"
    # this checkout's farm, whatever PYTHONPATH says: a relative one (`PYTHONPATH=.`) is read from the
    # farm's cwd, and the package installed in the virtual environment (another checkout) ran instead
    env = {**cli_env(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = (["nohup"] if nohup else []) + farm_argv("verify", "--all", "--config", str(config), "--no-report")
    with open(log, "wb") as out:
        farm = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env, start_new_session=True
        )
    try:
        wait_for(lambda: kernel_running(workdir, "t4", "slow") or farm.poll() is not None, 60, "the slow kernel")
    except BaseException:
        farm.kill()
        farm.wait()
        raise
    return workdir, farm, log


def test_a_hangup_stops_the_run_cleanly(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """`farm verify --all` started in an ssh session that then closed (SIGHUP): the farm died
    at once, its kernel went on running on the node, the run stayed `running` (the next run
    marked it aborted) and the process's status was a signal's. Now a hangup stops the run as
    SIGTERM does: the kernel killed, the unfinished cell not-run, the run stored aborted, exit 4."""
    workdir, farm, log = start_slow(ssh_fleet, tmp_path, 60, nohup=False)
    try:
        farm.send_signal(signal.SIGHUP)
        code = farm.wait(timeout=120)
    finally:
        if farm.poll() is None:
            farm.kill()
            farm.wait()
    text = log.read_text()
    assert code == EXIT_INFRA and "run 1 was stopped by SIGHUP" in text, (code, text)
    (run,) = query(tmp_path / "results.db", "SELECT * FROM runs")
    assert (run["status"], run["exit_code"]) == ("aborted", EXIT_INFRA)
    assert results(tmp_path / "results.db", 1)[("t4", "slow")]["outcome"] == "not-run"
    assert not kernel_running(workdir, "t4", "slow"), "the hung-up run's kernel still runs on the node"


def test_a_hangup_under_nohup_does_not_stop_the_run(ssh_fleet: Fleet, tmp_path: Path) -> None:
    """A run started with `nohup` is meant to outlive its session: the farm keeps the
    hangup ignored, and the run finishes green."""
    _, farm, log = start_slow(ssh_fleet, tmp_path, 3, nohup=True)
    try:
        farm.send_signal(signal.SIGHUP)
        code = farm.wait(timeout=120)
    finally:
        if farm.poll() is None:
            farm.kill()
            farm.wait()
    assert code == EXIT_OK, log.read_text()
    (run,) = query(tmp_path / "results.db", "SELECT * FROM runs")
    assert run["status"] == "finished"


def test_a_long_output_in_junit_keeps_its_end_and_says_what_it_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel printed 200,000 bytes before its verdict line: the farm stores them all (1 MiB
    kept), but JUnit's <system-out> was their first 65,536 characters, cut mid-line with nothing
    saying so: the kernel's last lines (its verdict, a mismatch report), which a reviewer reads
    in Jenkins, were gone. Now its head and its end are kept with a line saying what is left out."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    source = (
        "#include <cstdio>\n"
        'int main() { for (int i = 0; i < 4000; i++) std::printf("%049d\\n", i);\n'
        '  std::printf("the last words\\ntoy: PASS\\n"); return 0; }\n'
    )
    config = toy_farm(tmp_path / "farm", source=source)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == EXIT_OK
    done = cli.invoke(main, ["report", "--format", "junit", "--config", str(config)])
    (case,) = ET.fromstring(done.output).iter("testcase")
    out = case.findtext("system-out") or ""
    assert out.startswith("0" * 49 + "\n") and out.endswith("the last words\ntoy: PASS\n"), out[-200:]
    (note,) = [line for line in out.splitlines() if line.startswith("[farm: ")]
    assert "characters left out here" in note and "farm show 1" in note, note
    assert len(out) < 70_000


@pytest.mark.parametrize("damage", ["killed", "row lost"])
def test_the_json_exports_exit_code_of_a_run_that_is_not_whole_is_never_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A farm SIGKILLed mid-run (its run left `running`, no exit code) or a finished run that lost a
    cell's row: the export exits 4 and says `"complete": false`, but its `run.exit_code` was null
    (`jq '.run.exit_code // 0'` reads 0) or the stored 0. It is the export's code now, never 0;
    the stored one is `stored_exit_code`, and JUnit carries the code as a property."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path / "farm", broken="known-failure")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == EXIT_OK
    with sqlite3.connect(tmp_path / "farm" / "results.db") as db:
        if damage == "killed":
            db.execute("UPDATE runs SET status = 'running', exit_code = NULL, ended_at = NULL")
        else:
            db.execute("DELETE FROM results WHERE variant = 'broken'")
    done = cli.invoke(main, ["report", "--format", "json", "--config", str(config)])
    assert done.exit_code == EXIT_INFRA, done.output
    document = json.loads(done.output)
    assert document["complete"] is False
    assert document["run"]["exit_code"] == EXIT_INFRA, document["run"]
    assert document["run"]["stored_exit_code"] == (None if damage == "killed" else EXIT_OK)
    junit = cli.invoke(main, ["report", "--format", "junit", "--config", str(config)]).output
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit).iter("property")}
    assert props["exit_code"] == str(EXIT_INFRA), props


def test_the_json_summary_counts_a_killed_runs_unfinished_cells_as_infra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped run's unfinished cells are stored not-run and counted `infra` in the JSON's
    summary; a SIGKILLed run's (no row: listed under `unfinished`) were counted under `not_run`
    only, so its summary read `bad: 0, infra: 0`, the same as a green night's."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path / "farm", broken="known-failure")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == EXIT_OK
    with sqlite3.connect(tmp_path / "farm" / "results.db") as db:
        db.execute("UPDATE runs SET status = 'running', exit_code = NULL, ended_at = NULL")
        db.execute("DELETE FROM results WHERE variant = 'broken'")
    document = json.loads(cli.invoke(main, ["report", "--format", "json", "--config", str(config)]).output)
    assert len(document["unfinished"]) == 1
    assert document["summary"] == {"good": 1, "bad": 0, "infra": 1, "not_run": 1, "infra_error": 0}, document["summary"]
    junit = ET.fromstring(cli.invoke(main, ["report", "--format", "junit", "--config", str(config)]).output)
    assert junit.get("errors") == "2"  # the run itself and its unfinished cell


def test_the_exports_say_what_a_run_selected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reviewer's `farm verify toy:plain` after the nightly `--all`: a CI step exporting the
    latest run got a whole, green suite of one cell, with nothing saying the run tested a
    selection, not the fleet (the site's history says so; the exports did not)."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path / "farm", broken="fails")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 1
    assert cli.invoke(main, ["verify", "toy:plain", "--config", str(config)]).exit_code == EXIT_OK
    document = json.loads(cli.invoke(main, ["report", "--format", "json", "--config", str(config)]).output)
    assert document["run"]["id"] == 2 and document["run"]["selection"] == "toy:plain", document["run"]
    junit = cli.invoke(main, ["report", "--format", "junit", "--config", str(config)]).output
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit).iter("property")}
    assert props["selection"] == "toy:plain", props
