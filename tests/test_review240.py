"""Review 240: the run pages' column heads, a card its node no longer has, and the run pages
held to the database as the index is (follow-ups of review 234).

Histories are stored through the farm's own Store (no node is contacted), the site rendered with
report.site.render, and the pages read from disk.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_review234 import CARDS, MatrixCells, new_run, random_history, store_cell, text_of

from orchestrator.outcomes import RAN_AS_EXPECTED, is_as_expected, is_infra
from orchestrator.report import export
from orchestrator.report.model import collect
from orchestrator.report.site import render
from orchestrator.store.database import Store


class RunPage(HTMLParser):
    """A run page's matrix: its heads (node, card words) in order, and each cell by its result id:
    (row, node, card words, class, words). Older runs' cells carry no data-node: read by position."""

    def __init__(self) -> None:
        super().__init__()
        self.heads: list[tuple[str, str]] = []
        self.cells: dict[int, tuple[str, str, str, str, str]] = {}
        self.row = ""
        self.where = ""  # "head", "th", "td" or ""
        self.col = 0
        self.td: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "th" and "data-node" in a:
            self.heads.append((a["data-node"], ""))
            self.where = "head"
        elif tag == "tr":
            self.col, self.row = 0, ""
        elif tag == "th":
            self.where = "th"
        elif tag == "td":
            self.td = {"class": a.get("class", ""), "title": a.get("title", ""), "text": ""}
            self.where = "td"

    def handle_data(self, data: str) -> None:
        if self.where == "head" and self.heads and self.heads[-1][1] == "" and data.strip() != self.heads[-1][0]:
            node, _ = self.heads[-1]
            self.heads[-1] = (node, data.strip())
        elif self.where == "th":
            self.row += data
        elif self.where == "td":
            self.td["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.where == "td":
            if self.td["title"].startswith("result "):
                node, card = self.heads[self.col]
                rid = int(self.td["title"].split()[1])
                self.cells[rid] = (self.row.strip(), node, card, self.td["class"], self.td["text"])
            self.col += 1
            self.where = ""
        elif tag == "th":
            self.where = ""


def run_page(site: Path, run_id: int) -> RunPage:
    page = RunPage()
    page.feed((site / "runs" / f"{run_id}.html").read_text())
    return page


def heads_of(index: str, node: str) -> dict[str, str]:
    """index.html's heads of `node`: card (data-device) -> the head's HTML."""
    return dict(re.findall(rf'<th data-node="{node}" data-device="([^"]+)">(.*?)</th>', index, re.S))


# ------------------------------------------------------------ 1. a run page's heads say "(stand-in)"


def test_a_run_pages_head_says_stand_in_where_the_index_does(tmp_path: Path) -> None:
    """Before: n1's H100, a card the driver did not confirm, was headed "NVIDIA H100 (stand-in)" on
    the index and "NVIDIA H100" on runs/1.html, whose grey cell says "certifies nothing" and not
    why: a reviewer reading the run page took the column for the real card. Figure: both heads say
    "(stand-in)" of n1's card, and neither says it of n2's confirmed T4."""
    store = Store(f"sqlite:///{tmp_path}/r.db")
    run_id = new_run(store)
    store_cell(store, run_id, "n1", "h100", real=False, outcome="pass")
    store_cell(store, run_id, "n2", "t4", real=True, outcome="pass")
    store.finish_run(run_id, "finished", 0)
    site = tmp_path / "site"
    index = render(store, site).read_text()
    assert "(stand-in)" in heads_of(index, "n1")["NVIDIA H100"]
    assert "(stand-in)" not in heads_of(index, "n2")["Tesla T4"]
    heads = dict(run_page(site, run_id).heads)
    assert heads == {"n1": "NVIDIA H100 (stand-in)", "n2": "Tesla T4"}, heads


def test_each_run_page_heads_its_card_as_that_runs_probe_read_it(tmp_path: Path) -> None:
    """A run page is its run's: run 1's probe of n1 was a stand-in's, run 2's the driver's. Figure:
    runs/1.html says "(stand-in)", runs/2.html and the index (its latest result's card) do not."""
    store = Store(f"sqlite:///{tmp_path}/r.db")
    for real in (False, True):
        run_id = new_run(store)
        store_cell(store, run_id, "n1", "h100", real=real, outcome="pass")
        store.finish_run(run_id, "finished", 0)
    site = tmp_path / "site"
    index = render(store, site).read_text()
    assert "(stand-in)" not in heads_of(index, "n1")["NVIDIA H100"]
    assert run_page(site, 1).heads == [("n1", "NVIDIA H100 (stand-in)")]
    assert run_page(site, 2).heads == [("n1", "NVIDIA H100")]


# ------------------------------------------------------------ 2. a card its node no longer has


def test_a_pass_on_a_card_its_node_no_longer_has_certifies_nothing_now(tmp_path: Path) -> None:
    """Before: n1's T4 passed in run 1; run 2's probe of n1 found an A100 under the same name. The
    T4's column stayed green ("2 of 2 cells as expected"), its head alone saying the probe no longer
    finds the card, where the same swap under a new node name (a node gone from farm.yaml) is grey,
    not counted and flagged not-in-fleet: whether a pass is the fleet's hung on the node's name.
    Figure: the T4's pass is grey and says why in words, on the index, its run page and its cell
    page; the ledger flags its CC not-in-fleet; the A100's pass stays green."""
    store = Store(f"sqlite:///{tmp_path}/r.db")
    first = new_run(store)
    t4 = store_cell(store, first, "n1", "t4", real=True, outcome="pass")
    store.finish_run(first, "finished", 0)
    second = new_run(store)
    a100 = store_cell(store, second, "n1", "a100", real=True, outcome="pass")
    store.finish_run(second, "finished", 0)
    site = tmp_path / "site"
    index_path = render(store, site)
    index = index_path.read_text()
    cells = MatrixCells()
    cells.feed(index)
    old = cells.cells[("k:v", "n1", "Tesla T4")]
    assert old["class"].split()[:2] == ["good", "unconfirmed"], old
    assert "card not in the node now" in old["text"] and "certifies nothing" in old["text"], old
    new = cells.cells[("k:v", "n1", CARDS["a100"][0])]
    assert new["class"].split()[0] == "good" and "unconfirmed" not in new["class"], new
    assert "1 of 2 cells as expected" in text_of(index_path) and "1 as expected but certifying nothing" in index
    assert "no Tesla T4 in run 2's probe" in heads_of(index, "n1")["Tesla T4"]
    (_row, _node, _card, klass, words) = run_page(site, first).cells[t4]
    assert "unconfirmed" in klass and "certifies nothing" in words
    assert "no Tesla T4 in run 2" in (site / "cells" / f"{t4}.html").read_text().replace("&#39;", "'")
    assert "unconfirmed" not in run_page(site, second).cells[a100][3]
    model = collect(store, None, None, 30)
    (entry,) = json.loads(export.as_json(model))["ledger"]
    flags = [f for f in entry["flags"] if f["kind"] == "not-in-fleet"]
    assert len(flags) == 1 and "CC 7.5" in flags[0]["text"] and "no Tesla T4" in flags[0]["text"], entry["flags"]


# ------------------------------------------------------------ 3. property: the run pages are the database


def latest_cards(seen_cells: dict) -> dict[str, str]:
    """node -> the card its latest stored probe found (each stored cell stores its node's probe)."""
    latest: dict[str, tuple[int, str]] = {}
    for (_row, node, card), results in seen_cells.items():
        for rid, *_rest in results:
            if node not in latest or rid > latest[node][0]:
                latest[node] = (rid, card)
    return {node: card for node, (_rid, card) in latest.items()}


@pytest.mark.parametrize("seed", range(16))
def test_every_run_page_and_index_cell_and_head_is_the_database(tmp_path: Path, seed: int) -> None:
    """Property: every run page holds each of its run's results, in its row and its node's column;
    the column's head names the card, "(stand-in)" exactly where that run's probe was not the
    driver's; the cell says its outcome and is green exactly where the certification rule allows
    it (as expected; a card the driver confirmed; a run that finished; and, where it is its cell's
    standing verdict, a card its node's latest probe still finds). The index's cells and heads too.
    Before: a run page's heads never said "(stand-in)", and a swapped card's standing pass was
    green. Figure: the history read back from the database against every rendered page."""
    store = Store(f"sqlite:///{tmp_path}/r.db")
    seen = random_history(store, random.Random(seed))
    site = tmp_path / "site"
    index = render(store, site).read_text()
    with sqlite3.connect(tmp_path / "r.db") as db:
        status = dict(db.execute("SELECT id, status FROM runs"))
    now = latest_cards(seen.cells)
    standing = {}
    for key, results in seen.cells.items():
        verdicts = [r for r in results if not is_infra(r[2])]
        standing[key] = (verdicts or results)[-1]
    pages = {run_id: run_page(site, run_id) for run_id in status}
    for (row, node, card), results in seen.cells.items():
        for rid, run_id, outcome, real in results:
            shown_row, shown_node, head, klass, words = pages[run_id].cells[rid]
            assert (shown_row.replace(" ", ""), shown_node) == (row, node), (rid, shown_row, shown_node)
            assert head == (card if real else f"{card} (stand-in)"), (rid, head, real)
            assert words.replace("certifies nothing", "") == outcome, (rid, words)
            gone = standing[(row, node, card)][0] == rid and now[node] != card
            green = is_as_expected(outcome) and (real or outcome not in RAN_AS_EXPECTED)
            green = green and status[run_id] == "finished" and not gone
            classes = klass.split()
            assert (classes[0] == "good" and "unconfirmed" not in classes) == green, (rid, klass, status[run_id])
            if "unconfirmed" in classes:
                assert "certifies nothing" in words, (rid, words)
    cells = MatrixCells()
    cells.feed(index)
    newest: dict[tuple[str, str], tuple[int, bool]] = {}  # an index head's card: its latest standing verdict's
    for (_row, node, card), (rid, _run, _outcome, real) in standing.items():
        newest[(node, card)] = max(newest.get((node, card), (0, False)), (rid, real))
    for key, (_rid, run_id, outcome, real) in standing.items():
        _row, node, card = key
        head = heads_of(index, node)[card]
        assert ("(stand-in)" in head) == (not newest[(node, card)][1]), (key, head)
        assert ("gone-card" in head) == (now[node] != card), (key, head)
        klass = cells.cells[key]["class"].split()
        green = is_as_expected(outcome) and (real or outcome not in RAN_AS_EXPECTED)
        green = green and status[run_id] == "finished" and now[node] == card
        assert (klass[0] == "good" and "unconfirmed" not in klass) == green, (key, klass)
