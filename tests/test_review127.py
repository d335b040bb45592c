"""Review 127: the site and the terminal read as a reviewer certifying wgmma_gemm on CC 9.0, and
as a night operator reading an interrupted, infra-heavy run (a stopped node, a build-fail whose
2.6 MB build log was cut, a missing-refusal, a run stopped by SIGINT), on the committed Hopper
results.db and on a loopback stand-in fleet.

Findings (before -> after):

- "With which binary?": the certificate named its result, run, card (UUID), driver, nvcc, flags
  and farm commit, but not the sha256 of the binary that ran; it was on the cell page alone. The
  kernel page's evidence and the JSON ledger's certificates now carry `binary sha256`, and the
  index's certification line names it (short) and its link reads "result 478 of run 120", not
  "run 120" (the README says "result 478 of run 120"; the index had the run alone).
- A run stopped by SIGINT while its kernel hung read "not-run at build", its stage table "build
  stopped 11.089 s": the cell's stages go to the node in one shared trip, and the stop was
  told at the stage the farm was waiting in, not the one the node was at (the infra branch
  beside it already used the error's stage). An operator would look for a hung nvcc. It is
  told at the node's stage now: "not-run at run".
- The interrupted run's banner (index, run page) and the terminal's "run N was stopped by
  SIGINT: its unfinished cells are not-run" said what was lost, not what to do. Both now name
  the command that runs it again (`farm verify SELECTION --config FILE`); a bisection's run
  ("... at COMMIT") is left without one. The legend's infra row says a stopped run too ("the
  node could not be used" read as the node's fault).
- A node no probe ever reached (`down`: connection refused in every run) had its column head
  read "Tesla T4 (stand-in)": farm.yaml's word for the card, called a stand-in, which the
  legend defines as a card nvidia-smi named and the driver did not confirm. It reads "(declared:
  no probe read it)" now; a node whose stand-in nvidia-smi answered keeps "(stand-in)".

What held: the cut build log says so above it (bytes left out, of its size) and in the log at
the cut; stand-in passes are grey and hatched with "stand-in card: certifies nothing" on the
index, run page, terminal, JUnit (skipped, real_gpu false) and JSON; the aborted run's passes say
"run 2 did not finish: certifies nothing"; history.html greys the aborted run's count and names
the stand-in cards; the Hopper index answers "wgmma_gemm CC 9.0 VERIFIED" with card, node, run,
driver, nvcc and commit in its first screen of the ledger; JUnit, JSON, `farm show` and the
pages agree on every outcome of the stand-in runs; output the kernels print stays text.

Seen, left as is: an unreachable node's page says "Kernels run unconfined: the shell runner cannot
confine them" though nothing ran there; "What changed" calls every not-run "the node, not the
kernel" (the legend now names a stopped run); a stopped shared trip records the node's stage
alone, not the build and inspect it passed on the way.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from farm_cli import farm, farm_argv, farm_env
from faults import FAULTS_KERNEL, faults_job, faults_variant, wait_for, write_fault_farm
from nodes import Fleet, processes_matching, query
from test_report import TOY, certify, toy_identity
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.report.site import render
from orchestrator.store.database import Store

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu"]
MIN75 = {"min": "7.5"}
BINARY = "b1" * 32  # the certifying result's binary sha256


# ------------------------------------------------------- the reviewer: which binary


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose one finished run certified toy on CC 9.0 (a confirmed H100) with a known binary."""
    root = tmp_path_factory.mktemp("review127-cert")
    farm_ = load_farm(toy_farm(root, source=TOY, cc="{exactly: '9.0'}"))
    store = Store(farm_.database_url)
    store.journal = None
    run_id = store.begin_run(
        trigger="test", farm_version="0", host="h", config_file="farm.yaml", selection="--all", farm_commit="c0ffee"
    )
    certify(store, run_id, toy_identity(farm_), real=True, binary_sha256=BINARY)
    store.finish_run(run_id, "finished", 0)
    render(store, root / "reports", run_id, farm_)
    store.close()
    return root


def test_the_certificate_names_its_binary_on_the_kernel_page_the_index_and_in_json(certified: Path) -> None:
    evidence = (certified / "reports" / "kernels" / "toy.html").read_text().split('id="certification"', 1)[1]
    assert f"<dt>binary sha256</dt><dd>{BINARY}</dd>" in evidence, evidence[:3000]
    index = (certified / "reports" / "index.html").read_text()
    line = index.split('data-cc="9.0"', 1)[1].split("</span>", 1)[0]
    assert f"binary {BINARY[:12]}…" in line, line
    assert re.search(r'<a href="cells/(\d+)\.html">result \1 of run 1</a>', line), line
    done = farm("report", "--format", "json", "--config", str(certified / "farm.yaml"))
    assert done.returncode == 0, done.stderr
    (ledger,) = json.loads(done.stdout)["ledger"]
    (cert,) = ledger["capabilities"]["9.0"]["certificates"]
    assert cert["binary_sha256"] == BINARY, cert


# ------------------------------------------------- the operator: a run stopped by SIGINT


@dataclass
class Stopped:
    root: Path
    config: Path
    output: str
    code: int


def _kernel_running(workdir: Path) -> bool:
    """The slow cell's binary itself runs (its copy in the cell's scratch folder, no arguments)."""
    binary = f"/bin/{FAULTS_KERNEL}-slow"
    return any(cmd.endswith(binary) and " " not in cmd for _pid, cmd in processes_matching(f"{workdir}/cells/"))


@pytest.fixture(scope="module")
def stopped(ssh_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stopped]:
    """`farm verify --all` on t4 and the stopped `down` node, SIGINT once the slow kernel runs."""
    root = tmp_path_factory.mktemp("review127-stop")
    workdir = root / "work-t4"
    variants = {"slow": faults_variant("SLOWPASS", MIN75, "SLEEP_S=60", timeout=120)}
    nodes = {
        "t4": ssh_fleet["t4"].farm_entry(workdir),
        "down": ssh_fleet["down"].farm_entry(root / "work-down", connect_timeout=3),
    }
    config = write_fault_farm(root, nodes, [faults_job(variants)])
    proc = subprocess.Popen(
        farm_argv("verify", "--all", "--config", str(config)),
        cwd=root,
        env=farm_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: _kernel_running(workdir) or proc.poll() is not None, 90, "the slow kernel")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    yield Stopped(root, config, output, proc.returncode)


def test_a_kernel_stopped_in_its_run_is_not_run_at_run_not_at_build(stopped: Stopped) -> None:
    (row,) = query(stopped.root / "results.db", "SELECT * FROM results WHERE node = 't4'")
    assert row["outcome"] == "not-run", stopped.output
    assert row["failed_stage"] == "run", (row["failed_stage"], stopped.output)
    assert "not-run at run" in farm("show", str(row["id"]), "--config", str(stopped.config)).stdout


def test_the_stopped_runs_terminal_line_names_the_command_that_runs_it_again(stopped: Stopped) -> None:
    line = next(x for x in stopped.output.splitlines() if "was stopped by SIGINT" in x)
    assert line.endswith(f"for their verdicts run it again: farm verify --all --config {stopped.config}"), line


@pytest.fixture
def page() -> Iterator[object]:
    """A page of Debian's headless Chromium, JavaScript off, as the operator opens the nightly index."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            opened = browser.new_page(java_script_enabled=False)
            opened.set_default_timeout(5000)  # an element missing fails in seconds, not half a minute
            yield opened
        finally:
            browser.close()


def test_the_stopped_runs_banner_names_the_command_that_runs_it_again(stopped: Stopped, page) -> None:
    for name in ("index.html", "runs/1.html"):
        page.goto((stopped.root / "reports" / name).as_uri())
        banner = page.locator("#incomplete").inner_text()
        assert "did not finish (aborted" in banner, banner
        assert page.locator("#incomplete code#again").count() == 1, (name, banner)
        again = page.locator("#incomplete code#again").inner_text()
        assert again == f"farm verify --all --config {stopped.config}", (name, again)


def test_a_node_no_probe_reached_is_not_called_a_stand_in(stopped: Stopped, page) -> None:
    page.goto((stopped.root / "reports" / "index.html").as_uri())
    down = page.locator('#matrix th[data-node="down"]').inner_text()
    t4 = page.locator('#matrix th[data-node="t4"]').inner_text()
    assert "(declared: no probe read it)" in down and "stand-in" not in down, down
    assert "Tesla T4 (stand-in)" in t4, t4
