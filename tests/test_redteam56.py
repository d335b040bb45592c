"""Red-team round 56: the site and the certificates after farm.yaml and jobs/ change
between runs. A verdict judged against a job the course has since edited (a raised
`cc: min`, a variant removed, a known failure no longer declared) stayed green as the
fleet's standing, and the ledger kept a CC the job now refuses as VERIFIED."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from junitparser import JUnitXml, Skipped
from nodes import CARDS, nvidia_smi_script, smi_on_path
from test_report_browser import CHROMIUM, CHROMIUM_ARGS
from toyfarm import toy_farm

from orchestrator.cli import main


def green_on_a_t4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **toy: object) -> tuple[Path, CliRunner]:
    """The toy farm run on a T4 (a stand-in nvidia-smi, taken as confirmed by the driver: the
    GPU is the only stand-in), its cells as expected: (farm.yaml, the CLI runner)."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path / "farm", **toy)  # type: ignore[arg-type]
    cli = CliRunner()
    done = cli.invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 0, done.output
    with sqlite3.connect(tmp_path / "farm" / "results.db") as db:
        db.execute("UPDATE results SET real_gpu = 1")
        db.execute("UPDATE node_snapshots SET real_gpu = 1")
    return config, cli


def matrix_cell(index: Path, variant: str) -> str:
    found = re.search(rf'<td class="[^"]*"[^>]*data-cell="toy:{variant}".*?</td>', index.read_text(), re.S)
    assert found is not None, index.read_text()
    return found.group()


def fleet_line(index: Path) -> str:
    found = re.search(r'<p id="fleet">(.*?)</p>', index.read_text(), re.S)
    assert found is not None
    return " ".join(found.group(1).split())


def test_a_pass_on_a_card_the_job_now_refuses_is_not_green_nor_its_cc_plainly_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a green run on a confirmed T4, the course raised toy's `cc: min` to 8.0 (the T4's
    kernel must now be refused by its gate) and rendered with `farm report`: the matrix kept the
    T4's pass green ("1 of 1 cells as expected"), though the jobs now would call that run
    missing-refusal, and the ledger kept "CC 7.5: VERIFIED" with nothing beside it."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch)
    index = tmp_path / "farm" / "reports" / "index.html"
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    assert matrix_cell(index, "plain").startswith('<td class="good" ')
    job = tmp_path / "farm" / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("min: '7.5'", "min: '8.0'"))
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    cell = matrix_cell(index, "plain")
    assert cell.startswith('<td class="good unconfirmed" '), cell
    assert "job changed since" in cell and "must now be refused" in cell, cell
    assert fleet_line(index).startswith("The fleet's standing (each cell's latest verdict, the matrix below): 0 of 1")
    assert 'data-flag="contract-changed"' in index.read_text()
    # a CI gate exporting the latest run (no run since the edit): no plain pass either
    (suite,) = JUnitXml.fromstring(cli.invoke(main, ["report", "--format", "junit", "--config", str(config)]).output)
    (case,) = suite
    (skipped,) = case.result
    assert isinstance(skipped, Skipped) and "the job changed since" in skipped.message, skipped
    exported = cli.invoke(main, ["report", "--format", "json", "--config", str(config)]).output
    (record,) = json.loads(exported)["cells"]
    assert record["certifies_nothing"] is True and "must now be refused" in record["job_changed_since"], record
    with chromium_page() as page:  # what the reviewer sees: no green on that cell
        page.goto(index.as_uri())
        td = page.locator('table#matrix td[data-cell="toy:plain"]')
        colour = td.evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour != "rgb(220, 243, 220)", colour
        assert "job changed since" in td.inner_text()


@pytest.mark.parametrize("after", ["removed", "undeclared"])
def test_a_known_failure_whose_variant_or_declaration_is_gone_is_not_green(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """The variant `broken` failed as declared (known-failure, green); then the course removed
    the variant (or its known-failure declaration) from jobs/toy.yaml. `farm verify toy:plain`
    (a subset run) rendered the old known-failure green as the fleet's standing: a variant no job
    has, or a failure no longer declared, counted among the cells as expected."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch, broken="known-failure")
    toy_farm(tmp_path / "farm", broken=None if after == "removed" else "fails")
    done = cli.invoke(main, ["verify", "toy:plain", "--config", str(config)])
    assert done.exit_code == 0, done.output
    index = tmp_path / "farm" / "reports" / "index.html"
    cell = matrix_cell(index, "broken")
    assert cell.startswith('<td class="good unconfirmed" '), cell
    said = "is no longer in toy.yaml" if after == "removed" else "no longer declares this known failure"
    assert said in cell, cell
    with sqlite3.connect(tmp_path / "farm" / "results.db") as db:  # run 2's T4 confirmed too
        db.execute("UPDATE results SET real_gpu = 1")
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    assert ": 1 of 2 cells as expected" in fleet_line(index), fleet_line(index)


def test_a_known_failure_whose_when_no_longer_covers_its_nvcc_is_not_green(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The declaration stays but its `when` narrows: `nvcc: '>=13.0'` became `'<1'` (say, a fix
    shipped in the node's nvcc, and the course kept the failure declared for older ones). The
    old known-failure, of an nvcc the declaration no longer covers, stayed green: the report
    asked only whether some known failure of that outcome was declared, not where."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch, broken="known-failure")
    index = tmp_path / "farm" / "reports" / "index.html"
    assert matrix_cell(index, "broken").startswith('<td class="good" ')
    job = tmp_path / "farm" / "jobs" / "toy.yaml"
    assert "nvcc: '>=13.0'" in job.read_text()
    job.write_text(job.read_text().replace("nvcc: '>=13.0'", "nvcc: '<1'"))
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    cell = matrix_cell(index, "broken")
    assert cell.startswith('<td class="good unconfirmed" '), cell
    assert "known failures no longer cover this cell (nvcc " in cell, cell
    assert ": 1 of 2 cells as expected" in fleet_line(index), fleet_line(index)


class chromium_page:
    """A page of Debian's headless Chromium, JavaScript off, as a wary reviewer reads."""

    def __enter__(self) -> object:
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        return self._browser.new_context(java_script_enabled=False).new_page()

    def __exit__(self, *exc: object) -> None:
        self._browser.close()
        self._playwright.stop()


def test_a_renamed_kernels_old_rows_and_certificate_are_not_the_courses_green(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The course renamed toy to toy2 (its job and its source) after toy's green run on a
    confirmed T4; the next `farm verify --all` kept toy's old pass green as the fleet's standing
    and "kernels/toy.cpp: CC 7.5 VERIFIED" in the ledger, a file the course no longer has."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch)
    root = tmp_path / "farm"
    (root / "kernels" / "toy.cpp").rename(root / "kernels" / "toy2.cpp")
    job = (root / "jobs" / "toy.yaml").read_text().replace("toy.cpp", "toy2.cpp").replace("kernel: toy", "kernel: toy2")
    (root / "jobs" / "toy.yaml").unlink()
    (root / "jobs" / "toy2.yaml").write_text(job)
    done = cli.invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 0, done.output
    index = root / "reports" / "index.html"
    cell = matrix_cell(index, "plain")  # toy's, the first row
    assert cell.startswith('<td class="good unconfirmed" ') and "(kernels/toy.cpp) are not in" in cell, cell
    assert 'data-flag="removed"' in index.read_text()
    assert 'data-flag="removed"' in (root / "reports" / "kernels" / "toy.html").read_text()


def test_a_card_swapped_under_the_nodes_name_is_said_on_its_old_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node `here` held a T4 (green), then an A100 under the same name: the T4's column kept
    its pass, headed by the A100 probe's driver and nvcc, with nothing saying the node no longer
    holds a T4."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch)
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["a100"]), monkeypatch)
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    index = (tmp_path / "farm" / "reports" / "index.html").read_text()
    heads = dict(re.findall(r'<th data-node="here" data-device="([^"]+)">(.*?)</th>', index, re.S))
    assert "no Tesla T4 in run 2's probe" in heads["Tesla T4"], heads
    assert "gone-card" not in heads["NVIDIA A100-SXM4-40GB"], heads


def test_a_pass_of_bytes_since_edited_is_not_green_nor_a_plain_pass_in_the_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel's source was edited after its green on a confirmed T4 and `farm report` run (no
    run since): the matrix flagged "inputs changed since" but kept the cell green and counted it as
    expected, and the JUnit export of the latest run passed it: the bytes in kernels/ never ran."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch)
    source = tmp_path / "farm" / "kernels" / "toy.cpp"
    source.write_text(source.read_text() + "// edited after the run\n")
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    index = tmp_path / "farm" / "reports" / "index.html"
    cell = matrix_cell(index, "plain")
    assert cell.startswith('<td class="good unconfirmed stale-cell" ') and "inputs changed since" in cell, cell
    assert "stand-in card" not in cell, cell
    assert ": 0 of 1 cells as expected" in fleet_line(index), fleet_line(index)
    (suite,) = JUnitXml.fromstring(cli.invoke(main, ["report", "--format", "junit", "--config", str(config)]).output)
    (case,) = suite
    (skipped,) = case.result
    assert isinstance(skipped, Skipped) and "inputs changed since" in skipped.message, skipped


def test_two_farms_on_one_sqlite_file_under_two_hard_linked_names_do_not_run_at_once(tmp_path: Path) -> None:
    """Two farm roots, each with `database: sqlite:///results.db`, the second a hard link of the
    first (one file, two names): each took the lock beside its own name, so the second farm's run
    started during the first's, marked the live run aborted (its cells not-run) and wrote one
    database through a second WAL file. A database file with several names is refused."""
    from orchestrator.config.farm import load_farm
    from orchestrator.store.database import Store
    from orchestrator.store.lock import run_lock

    first, second = toy_farm(tmp_path / "a"), toy_farm(tmp_path / "b")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(first)]).exit_code == 0
    farm = load_farm(first)
    with run_lock(farm.database_url, farm.root, 0):  # the first farm's run, live
        store = Store(farm.database_url)
        live = store.begin_run(trigger="cron", farm_version="0", host="h", config_file=str(first), selection="--all")
        store.close()
        os.link(tmp_path / "a" / "results.db", tmp_path / "b" / "results.db")
        done = cli.invoke(main, ["verify", "--all", "--config", str(second)])
    assert done.exit_code == 5 and "has 2 names (hard links)" in done.output, done.output
    with sqlite3.connect(tmp_path / "a" / "results.db") as db:
        (status,) = db.execute("SELECT status FROM runs WHERE id = ?", (live,)).fetchone()
    assert status == "running", status


def test_every_node_the_matrix_heads_has_its_page_after_a_rename(tmp_path: Path) -> None:
    """The node `here` was renamed `there` in farm.yaml: its old column stays (the fleet's standing)
    and links nodes/here.html, but node pages were written only for nodes probed in the history's
    runs, so once `here` was out of them a fresh site (`--out`) linked a page never written."""
    from orchestrator.config.farm import load_farm
    from orchestrator.report.site import render
    from orchestrator.store.database import Store

    config = toy_farm(tmp_path / "farm")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    config.write_text(config.read_text().replace("  here:", "  there:"))
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    farm = load_farm(config)
    store = Store(farm.database_url)
    try:  # a history of one run: `here` is out of it, as after 30 runs without it
        index = render(store, tmp_path / "fresh", farm=farm, history_runs=1)
    finally:
        store.close()
    links = set(re.findall(r'href="([^"#]+)"', index.read_text()))
    assert "nodes/here.html" in links
    assert not [link for link in links if not (index.parent / link).exists()]


def test_a_pass_of_a_build_since_changed_in_the_job_is_not_green(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """toy:plain passed on a confirmed T4 built with -O1; the course changed the variant's build
    (here -O1 to -O0; -arch=sm_75 to -arch=sm_90a alike). The job file is no part of the identity,
    the variant kept its name, and the old pass stayed green as the standing of a build never run."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch)
    job = tmp_path / "farm" / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("g++ -O1", "g++ -O0"))
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    cell = matrix_cell(tmp_path / "farm" / "reports" / "index.html", "plain")
    assert cell.startswith('<td class="good unconfirmed" ') and "this verdict is of another build" in cell, cell


def test_a_build_as_run_is_matched_against_its_template_outside_the_fields() -> None:
    from orchestrator.report.rejudged import same_build

    template = "{nvcc} -O3 -arch=sm_75 -I {cutlass} -o {binary} {sources}"
    ran = "'/usr/local/cuda/bin/nvcc' -O3 -arch=sm_75 -I /b/2c84 -o /b/k-sm75 /b/55a4/kernels/k.cu"
    assert same_build(template, ran)
    assert not same_build(template.replace("sm_75", "sm_90a"), ran)
    assert not same_build(template + " -DEXTRA", ran)
    assert not same_build(template, ran + " -DDROPPED")  # a flag after {sources} removed from the job
    assert same_build("{nvcc} -o {binary} {sources}", "nvcc -o '/a b/k' /s/k.cu '/s/x y.cu'", sources=2)
