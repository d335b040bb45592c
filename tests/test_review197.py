"""Review 197: a reviewer certifying kernels from the farm's site, read in headless Chromium (JavaScript
off) after real runs on the loopback sshd fleet (t4, a100, h100: nvidia-smi stand-ins, taken as
confirmed by the driver by setting `real_gpu` in the database, as test_redteam56 does).

Findings (before -> after):

1. One kernel, contract `cc: min 7.5`, passing on the T4 and the H100 and failing on the A100: the
   certification ledger (index and kernel page) read "CC 7.5: VERIFIED, CC 9.0: VERIFIED" and said
   nothing of CC 8.0, where these same inputs fail now on a confirmed card; the failure was flagged
   (`now-failing`) only on a CC already VERIFIED, and the JSON ledger had no word of it either. The
   ledger flags it now: `failing`, "CC 8.0 is not VERIFIED: the latest result ... is fail".
2. A run stored without a report (`farm verify --no-report`, or a render that failed at its end)
   replaced index.html with "no report", but kernels/KERNEL.html, the page the README sends a
   reviewer to for a kernel's certification, stayed as rendered before it: "CC 9.0 VERIFIED", no
   word that a newer run exists (in which the H100 failed). Each kernel, node and history page now
   says at its top that run N is newer than the page and has no report.

What held (checked, no change): the matrix shows the A100's fail in words and red beside the green
passes, and the index's fleet line counts it; a flaky cell (fail in run 1, pass in run 2, the same
binary on the same card) shows "fixed: fail (run 1) -> pass" on the index and fail, pass in the
kernel page's history grid; JSON and JUnit agree with the matrix on every cell's outcome; every
status is a word, not a colour alone; no page has a script; printed to PDF (A4) the matrix keeps its
colours and wraps a 9-column fleet onto the page.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from nodes import Fleet, standin_job, standin_variant, write_farm
from test_report_browser import CHROMIUM, CHROMIUM_ARGS

from orchestrator.cli import main


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def page_text(browser: object, page: Path) -> str:
    context = browser.new_context(java_script_enabled=False)  # type: ignore[attr-defined]
    try:
        tab = context.new_page()
        tab.goto(page.as_uri())
        return tab.inner_text("body")
    finally:
        context.close()


class Farm:
    """The stand-in kernel on t4, a100 and h100; a node fails while its flag file is there."""

    def __init__(self, fleet: Fleet, root: Path) -> None:
        self.flags = root / "flags"
        self.flags.mkdir()
        prelude = root / "prelude.sh"
        prelude.write_text(
            f'for n in t4 a100 h100; do case "$PWD" in *work-$n/*) [ -e {self.flags}/fail-$n ] && '
            '{ echo "wrong numbers on $n" >&2; kill -9 $PPID $(ps -o ppid= -p $PPID); };; esac; done\n'
        )
        nodes = {n: fleet[n].farm_entry(root / f"work-{n}", connect_timeout=5) for n in ("t4", "a100", "h100")}
        job = standin_job("standin", {"min75": standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)})
        self.config = write_farm(root / "farm", nodes, [job])
        self.db = root / "farm" / "results.db"
        self.reports = root / "farm" / "reports"
        self.cli = CliRunner()

    def verify(self, *fail: str, report: bool = True) -> None:
        for node in ("t4", "a100", "h100"):
            (self.flags / f"fail-{node}").unlink(missing_ok=True)
        for node in fail:
            (self.flags / f"fail-{node}").touch()
        extra = [] if report else ["--no-report"]
        self.cli.invoke(main, ["verify", "--all", "--config", str(self.config), *extra])
        with sqlite3.connect(self.db) as db:  # the cards taken as confirmed by the driver
            db.execute("UPDATE results SET real_gpu = 1")
            db.execute("UPDATE node_snapshots SET real_gpu = 1")
        if report:
            done = self.cli.invoke(main, ["report", "--config", str(self.config)])
            assert done.exit_code in (0, 1), done.output

    def export(self, fmt: str) -> str:
        done = self.cli.invoke(main, ["report", "--format", fmt, "--config", str(self.config)])
        assert done.exit_code in (0, 1), done.output  # 1: a cell not as expected
        return done.output


def test_a_cc_failing_now_is_in_the_ledger_beside_the_verified_ones(
    ssh_fleet: Fleet, tmp_path: Path, browser: object
) -> None:
    """Before: the index's ledger read "CC 7.5: VERIFIED, CC 9.0: VERIFIED" with no word of the A100
    (CC 8.0) failing the same inputs now; nor did the kernel page's certification or the JSON ledger.
    Figure: standin passes on t4 and h100, fails on a100; the ledger flags CC 8.0 `failing`."""
    farm = Farm(ssh_fleet, tmp_path)
    farm.verify("a100")
    index = page_text(browser, farm.reports / "index.html")
    ledger = index[index.index("Certification") : index.index("Legend")]
    assert "CC 7.5: VERIFIED" in ledger and "CC 9.0: VERIFIED" in ledger, ledger
    assert "CC 8.0 is not VERIFIED" in ledger and "a100" in ledger, ledger
    kernel = page_text(browser, farm.reports / "kernels" / "standin.html")
    assert "CC 8.0 is not VERIFIED" in kernel, kernel
    flags = [f["kind"] for f in json.loads(farm.export("json"))["ledger"][0]["flags"]]
    assert flags == ["failing"], flags
    # the exports agree with the matrix on each cell
    cells = {c["node"]: c["outcome"] for c in json.loads(farm.export("json"))["cells"]}
    assert cells == {"t4": "pass", "a100": "fail", "h100": "pass"}, cells
    junit = farm.export("junit")
    assert junit.count("<failure") == 1 and 'name="a100"' in junit, junit


def test_a_kernel_page_says_a_newer_run_has_no_report(ssh_fleet: Fleet, tmp_path: Path, browser: object) -> None:
    """Before: after `farm verify --no-report` (the H100 failing in it), index.html said "Run 2: no
    report", but kernels/standin.html still read "CC 9.0 VERIFIED" with no word of run 2.
    Figure: run 1 green and rendered; run 2 with --no-report; the kernel page names run 2."""
    farm = Farm(ssh_fleet, tmp_path)
    farm.verify()
    kernel_page = farm.reports / "kernels" / "standin.html"
    assert "VERIFIED" in page_text(browser, kernel_page)
    farm.verify("h100", report=False)
    assert "Run 2: no report" in page_text(browser, farm.reports / "index.html")
    for page in (kernel_page, farm.reports / "history.html", farm.reports / "nodes" / "h100.html"):
        text = page_text(browser, page)
        assert "Run 2 is newer than this page" in text.split("\n\n", 2)[1], (page, text[:400])
    # the next render takes the word away: the pages are run 2's own then
    done = farm.cli.invoke(main, ["report", "--config", str(farm.config)])
    assert done.exit_code in (0, 1), done.output
    assert "newer than this page" not in page_text(browser, kernel_page)
