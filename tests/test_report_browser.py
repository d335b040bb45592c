"""The rendered report, read in a real headless Chromium with JavaScript off.

A small farm (t4, h100, nogpu and the stopped `down` node of the loopback sshd
fleet; two stand-in variants and a job whose kernel prints markup) is run
twice through the library API. Between the runs the `hopper` variant's build
line switches from -DMODE_PASS to -DMODE_FAILNUM: it still refuses the T4 (the
gate comes first) and has nothing to run on nogpu, so exactly one cell,
standin:hopper@h100, goes from pass to fail. A variant added between the runs
(`ampere`) gives the second run cells with no history: new, not regressions.

After each run the report is rendered with orchestrator.report.site.render and read
the way a reviewer reads it: from disk, in Chromium, without JavaScript. Every
verdict in the matrix is compared with the results table; a cell link leads to
the cell's logs and back; the second run's page lists the regression first;
what a kernel printed stays text. The second run's matrix is shot full-page;
with FARM_SCREENSHOT=PATH set, the shot is written there (docs/matrix.png,
the README's picture, was made so).

Chromium is Debian's /usr/bin/chromium (scripts/setup.sh --test installs it),
driven by Python's playwright; a missing browser fails, never skips.
"""

from __future__ import annotations

import os
import re
import sqlite3
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from nodes import Fleet, standin_job, standin_variant

from orchestrator.config.farm import load_farm
from orchestrator.outcomes import is_as_expected, is_infra
from orchestrator.plan import plan_cells
from orchestrator.report.site import render
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless=new",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOT_ENV = "FARM_SCREENSHOT"

KERNEL = "standin"
NODES = ["t4", "h100", "nogpu", "down"]
VARIANTS = {
    "min75": standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75"),
    "hopper": standin_variant("PASS", {"exactly": "9.0"}, "EXACT_CC=90"),
}
FLIPPED = "hopper"  # its build line switches to -DMODE_FAILNUM for the second run
REGRESSED = f"{KERNEL}:{FLIPPED}@h100"
ADDED = "ampere"  # a variant added for the second run
ADDED_VARIANT = standin_variant("PASS", {"min": "8.0"}, "MIN_CC=80")
NEW_PASS = f"{KERNEL}:{ADDED}@h100"
UNCHANGED_PASS = f"{KERNEL}:min75@t4"

# A kernel whose output (stdout, stderr, and a compiler warning in its build
# log) is markup that would break the page, or run a script, if not escaped.
HOSTILE = "hostile"
HOSTILE_VARIANT = "markup"
HOSTILE_STDOUT = '<script>alert(1)</script>\n</pre></td></tr></table><b id="injected">injected</b>\nhostile: PASS\n'
HOSTILE_SOURCE = r"""// Prints markup, for the report's escaping test.
#include <stdio.h>
#warning "<script>alert(3)</script></pre>"
int main(void) {
    fputs("<script>alert(1)</script>\n", stdout);
    fputs("</pre></td></tr></table><b id=\"injected\">injected</b>\n", stdout);
    fputs("<script>alert(2)</script></pre>\n", stderr);
    fputs("hostile: PASS\n", stdout);
    return 0;
}
"""


def hostile_job() -> dict:
    return {
        "kernel": HOSTILE,
        "description": "a stand-in that prints markup",
        "sources": [f"kernels/{HOSTILE}.cpp"],
        "pass_marker": "hostile: PASS",
        "refusal_marker": "hostile refuses",
        "timeout": 30,
        "build_timeout": 120,
        "variants": {
            HOSTILE_VARIANT: {
                "build": "g++ -O1 -o {binary} {sources}",
                "inspect": "objdump -d {binary}",
                "instructions": {"call": 1},
                "cc": {"min": "7.5"},
            }
        },
    }


# ------------------------------------------------------------------ the farm


@dataclass
class Rendered:
    """One run of the farm and the report rendered right after it."""

    run_id: int
    index: Path
    db: Path

    def rows(self) -> list[sqlite3.Row]:
        con = sqlite3.connect(self.db)
        con.row_factory = sqlite3.Row
        try:
            return con.execute("SELECT * FROM results WHERE run_id = ? ORDER BY id", (self.run_id,)).fetchall()
        finally:
            con.close()

    def row(self, kernel: str, variant: str, node: str) -> sqlite3.Row:
        found = [r for r in self.rows() if (r["kernel"], r["variant"], r["node"]) == (kernel, variant, node)]
        assert len(found) == 1, f"{kernel}:{variant}@{node}: {len(found)} rows in run {self.run_id}"
        return found[0]

    def standing(self) -> dict[str, str]:
        """What the matrix must show: per cell, its latest verdict from any run up
        to this one (infra results carry none), else its latest result."""
        con = sqlite3.connect(self.db)
        try:
            rows = con.execute(
                "SELECT kernel, variant, node, outcome FROM results WHERE run_id <= ? ORDER BY id", (self.run_id,)
            ).fetchall()
        finally:
            con.close()
        cells: dict[str, str] = {}
        for kernel, variant, node, outcome in rows:
            label = f"{kernel}:{variant}@{node}"
            if outcome not in ("infra-error", "not-run") or cells.get(label, "infra-error") in (
                "infra-error",
                "not-run",
            ):
                cells[label] = outcome
        return cells

    @property
    def url(self) -> str:
        return self.index.as_uri()

    @property
    def run_page(self) -> str:
        return (self.index.parent / "runs" / f"{self.run_id}.html").as_uri()


@dataclass
class Runs:
    first: Rendered
    second: Rendered


def run_and_render(farm_file: Path, selectors: list[str], reports: Path) -> Rendered:
    farm = load_farm(farm_file)
    cells = plan_cells(farm, selectors, NODES)
    store = Store(farm.database_url)
    try:
        summary = run_cells(farm, store, cells, cache_dir=farm_file.parent / "archives", trigger="test")
        index = render(store, reports)
    finally:
        store.close()
    assert index == reports / "index.html" and index.is_file(), index
    return Rendered(summary.run_id, index, farm_file.parent / "results.db")


@pytest.fixture(scope="module")
def runs(ssh_fleet: Fleet, make_farm: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("browser-farm")
    nodes = {name: ssh_fleet[name].farm_entry(root / f"work-{name}", connect_timeout=5) for name in NODES}
    farm_file = make_farm(root, nodes, [standin_job(KERNEL, VARIANTS), hostile_job()])
    (root / "kernels" / f"{HOSTILE}.cpp").write_text(HOSTILE_SOURCE)

    # The first run: every cell, the hostile kernel's included; the second run
    # leaves the hostile kernel out, so the README's picture does not show it.
    first = run_and_render(
        farm_file,
        [f"{KERNEL}:{v}" for v in VARIANTS] + [f"{HOSTILE}:{HOSTILE_VARIANT}"],
        root / "reports-1",
    )

    job_file = root / "jobs" / f"{KERNEL}.yaml"
    job = yaml.safe_load(job_file.read_text())
    build = job["variants"][FLIPPED]["build"]
    assert "-DMODE_PASS" in build, build
    job["variants"][FLIPPED]["build"] = build.replace("-DMODE_PASS", "-DMODE_FAILNUM")
    job["variants"][ADDED] = ADDED_VARIANT
    job_file.write_text(yaml.safe_dump(job, sort_keys=False))

    second = run_and_render(farm_file, [f"{KERNEL}:{v}" for v in [*VARIANTS, ADDED]], root / "reports-2")
    return Runs(first, second)


# --------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        pytest.fail(
            f"the browser tests need Python's playwright ({err}): `pip install -e '.[test]'` (scripts/setup.sh --test)",
            pytrace=False,
        )
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"the browser tests need Chromium at {CHROMIUM}: `apt-get install chromium` "
            "(scripts/setup.sh --test installs it); Playwright's own browser download "
            "is not used",
            pytrace=False,
        )
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    """A page of a fresh context with JavaScript disabled, as a wary reviewer reads."""
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 800})
    try:
        yield context.new_page()
    finally:
        context.close()


def matrix_cells(page) -> dict[str, str]:
    """{"kernel:variant@node": outcome text} of every cell of table#matrix."""
    cells: dict[str, str] = {}
    for td in page.locator("table#matrix td[data-node][data-cell]").all():
        label = f"{td.get_attribute('data-cell')}@{td.get_attribute('data-node')}"
        links = td.locator("a.outcome")
        assert links.count() == 1, f"{label}: {links.count()} a.outcome links in its cell"
        assert label not in cells, f"{label} appears twice in the matrix"
        cells[label] = links.inner_text().strip()
    return cells


def database_cells(rendered: Rendered) -> dict[str, str]:
    return {f"{r['kernel']}:{r['variant']}@{r['node']}": r["outcome"] for r in rendered.rows()}


def open_cell(page, rendered: Rendered, label: str) -> None:
    """From the matrix, follow the outcome link of the cell `kernel:variant@node`."""
    cell, _, node = label.partition("@")
    page.goto(rendered.url)
    link = page.locator(f'table#matrix td[data-node="{node}"][data-cell="{cell}"] a.outcome')
    assert link.count() == 1, f"{label}: no outcome link in the matrix"
    link.click()
    page.wait_for_load_state()
    assert page.url != rendered.url, f"{label}: following its link left the page at the matrix"


def assert_summary(page, rendered: Rendered) -> None:
    outcomes = [r["outcome"] for r in rendered.rows()]
    good = sum(1 for o in outcomes if is_as_expected(o))
    infra = sum(1 for o in outcomes if is_infra(o))
    bad = len(outcomes) - good - infra
    summary = page.locator("#summary")
    assert summary.count() == 1, "no #summary on the matrix page"
    text = " ".join(summary.inner_text().split())
    for what, pattern in [
        (f"{good} as expected", rf"\b{good} (?:of {len(outcomes)} )?(?:cells? )?as expected"),
        (f"{bad} not as expected", rf"\b{bad} (?:cells? )?not as expected"),
        (f"{infra} infra", rf"\b{infra} (?:cells? )?infra"),
        (f"{len(outcomes)} cells in all", rf"\b{len(outcomes)}\b"),
    ]:
        assert re.search(pattern, text), f"#summary does not say {what!r}: {text!r}"


# ----------------------------------------------------------------- the tests


def test_matrix_reads_every_verdict_without_javascript(runs: Runs, page) -> None:
    for rendered in (runs.first, runs.second):
        page.goto(rendered.url)
        assert page.title(), f"{rendered.index}: the page has no title"
        expected = rendered.standing()
        assert len(expected) >= 8, expected
        shown = matrix_cells(page)
        assert shown == expected, f"run {rendered.run_id}: matrix {shown} is not the fleet's standing {expected}"
        assert_summary(page, rendered)
        # each cell's colour class is its outcome's category (issue 9, case 10: the cell page too)
        for td in page.locator("table#matrix td[data-node][data-cell]").all():
            outcome = td.locator("a.outcome").inner_text().strip()
            want = "infra" if is_infra(outcome) else ("good" if is_as_expected(outcome) else "bad")
            assert want in (td.get_attribute("class") or "").split(), (outcome, td.get_attribute("class"))


def test_the_matrix_is_the_fleets_standing_and_each_run_keeps_its_own(runs: Runs, page) -> None:
    """Issue 9, case 6: the second run left the hostile kernel out; its cells stay
    in the matrix with the run they came from, and runs/ID.html is the run's own."""
    hostile = f"{HOSTILE}:{HOSTILE_VARIANT}@t4"
    assert hostile not in database_cells(runs.second)
    page.goto(runs.second.url)
    cell = page.locator(f'table#matrix td[data-node="t4"][data-cell="{HOSTILE}:{HOSTILE_VARIANT}"]')
    assert cell.count() == 1
    assert cell.get_attribute("data-run") == str(runs.first.run_id)
    assert f"run {runs.first.run_id}" in cell.inner_text()
    page.goto(runs.second.run_page)
    own = {
        f"{td.get_attribute('data-cell')}@{td.get_attribute('data-node')}": td.locator("a").inner_text().strip()
        for td in page.locator("table#matrix td[data-cell]").all()
    }
    assert own == database_cells(runs.second)
    # a grey cell says so in words, not in colour alone (review 97): these nodes' cards are stand-ins
    for td in page.locator("table#matrix td.unconfirmed[data-cell]").all():
        assert "certifies nothing" in td.inner_text(), td.inner_text()


def test_cell_pages_carry_their_outcomes_colour(runs: Runs, page) -> None:
    """Issue 9, case 10: the cell page's outcome has its category's class, not a function's repr."""
    for row in runs.second.rows():
        page.goto((runs.second.index.parent / "cells" / f"{row['id']}.html").as_uri())
        outcome = page.locator("td#outcome")
        want = "infra" if is_infra(row["outcome"]) else ("good" if is_as_expected(row["outcome"]) else "bad")
        # as expected on a card the driver did not confirm (these nodes' stand-ins): grey, "unconfirmed"
        unsure = row["outcome"] in ("pass", "expected-refusal", "fixed") and row["device"] and not row["real_gpu"]
        assert outcome.get_attribute("class") == want + (" unconfirmed" if unsure else ""), row["outcome"]
        if unsure:
            style = outcome.evaluate("e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).backgroundImage]")
            assert style[0] != "rgb(220, 243, 220)" and "repeating-linear-gradient" in style[1], style
            assert "certifies nothing" in outcome.inner_text()
        assert "function" not in page.content()


def test_runs_have_the_outcomes_planned(runs: Runs) -> None:
    got = database_cells(runs.first)
    assert got[f"{KERNEL}:min75@t4"] == "pass"
    assert got[f"{KERNEL}:hopper@t4"] == "expected-refusal"
    assert got[REGRESSED] == "pass"
    assert got[f"{KERNEL}:hopper@nogpu"] == "compile-only"
    assert got[f"{KERNEL}:min75@down"] == "infra-error"
    assert got[f"{HOSTILE}:{HOSTILE_VARIANT}@t4"] == "pass"
    second = database_cells(runs.second)
    assert second[REGRESSED] == "fail"
    assert (second[NEW_PASS], second[f"{KERNEL}:{ADDED}@t4"]) == ("pass", "expected-refusal")
    changed = {c for c in second if c in got and got[c] != second[c]}
    assert changed == {REGRESSED}, f"cells whose outcome changed between runs: {changed}"


def test_cell_link_leads_to_its_log_and_back(runs: Runs, page) -> None:
    row = runs.first.row(KERNEL, "min75", "t4")
    open_cell(page, runs.first, UNCHANGED_PASS)
    stdout = page.locator("pre#stdout")
    assert stdout.count() == 1, f"no pre#stdout on {page.url}"
    text = stdout.inner_text()
    assert "standin: PASS" in text, text
    assert "standin: device CC 7.5" in text, f"not the T4's log: {text!r}"
    assert text.strip() == bytes(row["stdout"]).decode().strip()
    assert page.locator("pre#build-log").count() == 1, f"no pre#build-log on {page.url}"

    back = page.locator('a[href$="index.html"]').first
    assert back.count() == 1, f"no link back to the matrix on {page.url}"
    back.click()
    page.wait_for_load_state()
    assert page.url == runs.first.url, f"the link back led to {page.url}"
    assert page.locator("table#matrix").count() == 1


def test_changes_come_first_and_name_the_regression(runs: Runs, page) -> None:
    page.goto(runs.second.url)
    changes = page.locator("section#changes")
    assert changes.count() == 1, (
        "the second run's matrix page has no <section id='changes'> listing what changed since the previous run"
    )
    before = page.locator("xpath=//section[@id='changes']/following::table[@id='matrix']")
    assert before.count() == 1, "section#changes must come before table#matrix in the page"

    regressed = changes.locator(f'[data-cell="{REGRESSED}"]')
    assert regressed.count() >= 1, f"{REGRESSED} (pass -> fail) is not in section#changes"
    kinds = {regressed.nth(i).get_attribute("data-change") for i in range(regressed.count())}
    assert kinds == {"regression"}, f"{REGRESSED} is listed as {kinds}, not a regression"

    regressions = changes.locator('[data-change="regression"]')
    listed = {regressions.nth(i).get_attribute("data-cell") for i in range(regressions.count())}
    assert listed == {REGRESSED}, f"regressions listed: {listed}, only {REGRESSED} regressed"
    assert page.locator(f'[data-cell="{UNCHANGED_PASS}"][data-change="regression"]').count() == 0

    # the added variant's cells have no history: new, whatever their outcome
    for label in (NEW_PASS, f"{KERNEL}:{ADDED}@t4"):
        added = changes.locator(f'[data-cell="{label}"]')
        kinds = {added.nth(i).get_attribute("data-change") for i in range(added.count())}
        assert kinds == {"new"}, f"{label}, added for this run, is listed as {kinds or 'nothing'}"


def test_changes_list_the_machine_code_the_new_flags_moved(runs: Runs, page) -> None:
    """The hopper variant's sources are the same in both runs, its flags are not:
    each of its cells whose instruction counts moved is listed under what changed,
    with the counts of both runs as the database holds them (sass_counts)."""
    con = sqlite3.connect(runs.second.db)
    try:
        counted = con.execute(
            "SELECT r.run_id, r.kernel || ':' || r.variant || '@' || r.node, s.instruction, s.count "
            "FROM sass_counts s JOIN results r ON r.id = s.result_id WHERE r.run_id IN (?, ?)",
            (runs.first.run_id, runs.second.run_id),
        ).fetchall()
    finally:
        con.close()
    before = {(cell, name): n for run, cell, name, n in counted if run == runs.first.run_id}
    moved = {
        cell: f"{name} {before[(cell, name)]} → {n}"
        for run, cell, name, n in counted
        if run == runs.second.run_id and (cell, name) in before and before[(cell, name)] != n
    }
    assert REGRESSED in moved, f"-DMODE_FAILNUM did not change {REGRESSED}'s counts: {counted}"
    page.goto(runs.second.url)
    items = page.locator("section#changes [data-sass-cell]")
    listed = {
        items.nth(i).get_attribute("data-sass-cell"): items.nth(i).get_attribute("data-sass")
        for i in range(items.count())
    }
    assert listed == moved, f"listed {listed}, moved {moved}"
    said = page.locator("section#changes").inner_text()
    assert f"{moved[REGRESSED]} since run {runs.first.run_id}, same inputs" in said, said


def test_kernel_output_is_text_not_markup(runs: Runs, page) -> None:
    page.goto(runs.first.url)
    assert page.locator("script").count() == 0, "the matrix page has a script element"
    assert matrix_cells(page) == database_cells(runs.first), "the matrix lost cells"

    label = f"{HOSTILE}:{HOSTILE_VARIANT}@t4"
    row = runs.first.row(HOSTILE, HOSTILE_VARIANT, "t4")
    assert bytes(row["stdout"]).decode() == HOSTILE_STDOUT, "the kernel did not print its markup"
    open_cell(page, runs.first, label)
    stdout = page.locator("pre#stdout")
    assert stdout.count() == 1, f"no pre#stdout on {page.url}"
    text = stdout.inner_text()
    assert "<script>alert(1)</script>" in text, f"pre#stdout lacks the literal <script>: {text!r}"
    assert "</pre></td></tr></table>" in text, text
    assert "hostile: PASS" in text, "the output was cut short at its markup"
    stderr = page.locator("pre#stderr").inner_text()
    assert "<script>alert(2)</script>" in stderr, f"pre#stderr lacks the literal <script>: {stderr!r}"
    build_log = page.locator("pre#build-log").inner_text()
    assert "<script>alert(3)</script>" in build_log, f"the build log lacks g++'s warning: {build_log!r}"
    assert page.locator("script").count() == 0, "the cell page has a script element"
    assert page.locator("#injected").count() == 0, "the kernel's markup became an element"


def test_matrix_screenshot(runs: Runs, page, tmp_path) -> None:
    shot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "matrix.png")
    # A short viewport: the full-page shot is then as tall as the page, no taller.
    page.set_viewport_size({"width": 1280, "height": 300})
    page.goto(runs.second.url)
    outcomes = set(database_cells(runs.second).values())
    assert {"pass", "expected-refusal", "compile-only", "fail", "infra-error"} <= outcomes
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    assert width == 1280 and height >= 400, (width, height)
