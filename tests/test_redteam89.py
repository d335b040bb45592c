"""Red team, round 89: the site read in Chromium (JavaScript off) after runs of mixed outcomes.

1. history.html painted a finished run's "as expected" count green when its passes were on
   cards the NVIDIA driver did not confirm (stand-ins): the matrix, the run's own page and
   the ledger grey them, and the history said the night was green.
2. Invisible characters (U+200B zero width space, U+2060 word joiner, U+FEFF, a soft hyphen,
   variation selectors) in a node's strings reached the pages as they were: two card models'
   columns on one node both read "NVIDIA H100", one greyed (its run did not finish) beside a
   green one, and its head said "no NVIDIA H100 in run 3's probe (there: NVIDIA H100)".
3. The legend's grey row said a grey cell was a pass, expected-refusal or fixed on a
   "(stand-in)" card, while the matrix greys any as-expected verdict of a run that did not
   finish (a compile-only too, which the legend's green row lists) on a real card as well.
4. Printed (Chromium's print to PDF, page.pdf(), with its default of no background graphics)
   every verdict's colour was dropped: a run page's pass on a stand-in card printed as a
   confirmed card's pass, and a cell page's stdout was cut at its box's height (40em), its
   end left off the paper without a word.
5. A verdict whose job changed since (test below) was grey on the matrix and its cell page,
   green on its run's own page and the kernel page's history.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_report import TOY, certify, toy_identity
from test_report_browser import browser, page  # noqa: F401 - the fixtures
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.report.site import render
from orchestrator.store.database import Store
from orchestrator.terminal import printable, printable_on_page

GREEN = "rgb(220, 243, 220)"  # td.good's background (base.html.j2)
H100 = "NVIDIA H100"
LOOKALIKE = H100 + "\u200b"  # a zero width space: the same card name to the eye
LONG = b"".join(b"line %d of the kernel's output\n" % i for i in range(300)) + b"toy: PASS\n"
BUILT = "g++ -O1 -o /w/toy kernels/toy.cpp"  # the toy job's build as run: no "job changed since"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Run 1 (finished): a pass on a stand-in T4 only. Run 2 (finished): a pass on a
    confirmed H100. Run 3 (aborted): a pass on the node's other, look-alike card model
    and a compile-only on a node without a GPU. The site of run 3, rendered."""
    root = tmp_path_factory.mktemp("rt89")
    farm = load_farm(toy_farm(root, source=TOY, cc="{exactly: '9.0'}"))
    store = Store(farm.database_url)
    store.journal = None
    sha = toy_identity(farm)
    try:

        def run(status: str, *cells: dict) -> None:
            run_id = store.begin_run(trigger="test", farm_version="0", host="h", config_file="x", selection="--all")
            for fields in cells:
                certify(store, run_id, sha, build_command=BUILT, **fields)
            store.finish_run(run_id, status, 0 if status == "finished" else 4)

        run("finished", {"real": False, "node": "t4", "device": "Tesla T4", "cc": "7.5"})
        run("finished", {"real": True, "device": H100, "stdout": LONG})
        run(
            "aborted",
            {"real": True, "device": LOOKALIKE},
            {"real": False, "node": "cpu", "device": "", "cc": None, "outcome": "compile-only"},
        )
        render(store, root / "reports")
    finally:
        store.close()
    yield root / "reports"


def test_history_paints_no_green_count_of_passes_on_unconfirmed_cards(site: Path, page) -> None:  # noqa: F811
    page.goto((site / "history.html").as_uri())
    expected = {}
    for run_id in (1, 2):
        cell = page.locator(f'tr[data-run="{run_id}"] td').nth(6)  # the "as expected" column
        expected[run_id] = (cell.evaluate("e => getComputedStyle(e).backgroundColor"), cell.inner_text())
    assert expected[1][0] != GREEN, expected  # its one pass was on a stand-in: it certifies nothing
    assert "certif" in expected[1][1], expected
    assert expected[2][0] == GREEN, expected  # a confirmed card's pass in a finished run stays green


@pytest.mark.parametrize("hidden", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\ufe0f", "\u180e"])
def test_invisible_characters_are_shown_as_escapes(hidden: str) -> None:
    for shown in (printable_on_page(f"{H100}{hidden}"), printable(f"{H100}{hidden}")):
        assert hidden not in shown and shown.startswith(H100) and shown != H100, ascii(shown)


def test_two_card_names_that_differ_only_by_an_invisible_character_read_apart(site: Path, page) -> None:  # noqa: F811
    page.goto((site / "index.html").as_uri())
    heads = page.locator('table#matrix thead th[data-node="hopper"]')
    assert heads.count() == 2
    seen = []
    for i in range(2):
        text = heads.nth(i).locator("small").first.inner_text()
        seen.append("".join(c for c in text if unicodedata.category(c) != "Cf"))  # what the eye sees
    assert seen[0] != seen[1], seen
    assert "\u200b" not in (site / "index.html").read_text()


def test_the_legend_names_every_outcome_and_reason_the_matrix_greys(site: Path, page) -> None:  # noqa: F811
    page.goto((site / "index.html").as_uri())
    grey = page.locator("table#matrix td.good.unconfirmed a.outcome").all_inner_texts()
    assert {"pass", "compile-only"} <= set(grey), grey  # the stand-in's pass, the aborted run's two
    row = page.locator("table#legend tr", has=page.locator("td.good.unconfirmed"))
    words, meaning = (td.inner_text() for td in row.locator("td").all())
    listed = set(re.findall(r"[a-z]+(?:-[a-z]+)*", words))
    assert set(grey) <= listed, (grey, words)
    assert "did not finish" in meaning and "did not confirm" in meaning and "since changed" in meaning, meaning


def _fills(pdf: bytes) -> set[bytes]:
    """The fill colours (`r g b rg`) a PDF's content streams paint with."""
    found: set[bytes] = set()
    for stream in re.findall(rb"stream\r?\n(.*?)endstream", pdf, re.S):
        try:
            found |= set(re.findall(rb"([\d.]+ [\d.]+ [\d.]+) rg", zlib.decompress(stream)))
        except zlib.error:  # an image's or a font's
            continue
    return found


PDF_GREEN = b".8627 .9529 .8627"  # #dcf3dc as Chromium writes it into a PDF


def test_a_printed_run_page_tells_a_stand_ins_pass_from_a_confirmed_one(site: Path, page) -> None:  # noqa: F811
    printed = {}
    for run_id in (1, 2):  # run 1: a stand-in T4's pass; run 2: a confirmed H100's
        page.goto((site / "runs" / f"{run_id}.html").as_uri())
        # a stand-in's pass says in words that it certifies nothing (round 97), a confirmed card's does not
        said = "pass\ncertifies nothing" if run_id == 1 else "pass"
        assert page.locator("table#matrix td[title]").inner_text() == said
        # the legend's green swatch is on every run page now (round 97): the matrix's cell is what is asked
        page.evaluate("document.getElementById('legend').remove()")
        printed[run_id] = _fills(page.pdf())
    assert PDF_GREEN in printed[2], printed
    assert PDF_GREEN not in printed[1], printed


def test_a_printed_cell_page_keeps_the_whole_output(site: Path, page) -> None:  # noqa: F811
    page.goto((site / "cells" / "2.html").as_uri())
    page.emulate_media(media="print")
    stdout = page.locator("pre#stdout")
    shown, whole = stdout.evaluate("e => [e.clientHeight, e.scrollHeight]")
    assert shown >= whole, (shown, whole)  # nothing left in a scroll box paper cannot scroll


def test_a_verdict_whose_job_changed_since_is_green_on_no_page(tmp_path: Path, page) -> None:  # noqa: F811
    """5. A confirmed card's pass, then the variant's build flags edited (-O1 to -O2): the
    matrix and the cell page grey it ("job changed since"), and the run's own page, which
    the matrix links as "this run's own matrix", and the kernel page's history painted the
    same result green."""
    farm_file = toy_farm(tmp_path, source=TOY, cc="{exactly: '9.0'}")
    farm = load_farm(farm_file)
    store = Store(farm.database_url)
    store.journal = None
    try:
        run_id = store.begin_run(trigger="test", farm_version="0", host="h", config_file="x", selection="--all")
        result = certify(store, run_id, toy_identity(farm), real=True, device=H100, build_command=BUILT)
        store.finish_run(run_id, "finished", 0)
        job = tmp_path / "jobs" / "toy.yaml"
        job.write_text(job.read_text().replace("g++ -O1 -o", "g++ -O2 -o"))
        render(store, tmp_path / "reports", farm=load_farm(farm_file))
    finally:
        store.close()
    colours = {}
    for name, where in (
        ("index.html", f'table#matrix td[data-run="{run_id}"]'),
        (f"cells/{result}.html", "td#outcome"),
        (f"runs/{run_id}.html", f'table#matrix td[title="result {result}"]'),
        ("kernels/toy.html", "table#kernel-history td.h"),
    ):
        page.goto((tmp_path / "reports" / name).as_uri())
        cell = page.locator(where)
        assert "pass" in cell.inner_text(), name
        colours[name] = cell.evaluate("e => getComputedStyle(e).backgroundColor")
    assert GREEN not in colours.values(), colours
