"""Review 234: the report read as a reviewer certifying a kernel reads it, in its words alone.

Histories are stored through the farm's own Store (no node is contacted), the site rendered
with report.site.render, and the pages read from disk: as text (what a screen reader says and a
black-and-white printout keeps) and, for the property test, cell by cell against the database.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_report import certify
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.outcomes import RAN_AS_EXPECTED, is_as_expected, is_infra
from orchestrator.report.site import render
from orchestrator.store.database import Store

CARDS = {"t4": ("Tesla T4", "7.5"), "a100": ("NVIDIA A100-SXM4-40GB", "8.0"), "h100": ("NVIDIA H100", "9.0")}
OUTCOMES = [
    "pass",
    "fail",
    "expected-refusal",
    "known-failure",
    "compile-only",
    "build-fail",
    "timeout",
    "infra-error",
    "not-run",
]


def new_run(store: Store) -> int:
    return store.begin_run(trigger="t", farm_version="0", host="h", config_file="f", selection="--all")


def store_cell(
    store: Store, run_id: int, node: str, card: str, *, real: bool, outcome: str, variant: str = "v", kernel: str = "k"
) -> int:
    """One cell's result, with its node's probe, as a run stores it (a real card when `real`)."""
    gpu, cc = CARDS[card]
    return certify(
        store,
        run_id,
        "b" * 64,
        real=real,
        cc=cc,
        node=node,
        gpu=gpu,
        kernel=kernel,
        variant=variant,
        outcome=outcome,
        contract="CC >= 7.5",
        expected_reason="its contract admits the card",
        reason="why",
        build_command="nvcc -o {binary}",
        stdout=b"",
        source_sha256="a" * 64,
        sources={"kernels/k.cu": "a" * 64},
    )


BLOCKS = frozenset({"p", "li", "td", "th", "tr", "small", "h1", "h2", "div", "section", "dd", "dt"})


def text_of(page: Path) -> str:
    """The page's text as a screen reader or a printout without colour has it: tags dropped."""

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []
            self.skip = False

        def handle_starttag(self, tag: str, attrs: list) -> None:
            self.skip = tag in ("style", "script")

        def handle_endtag(self, tag: str) -> None:
            self.skip = False
            if tag in BLOCKS:  # an inline tag's end (a link, a span) is no word boundary
                self.parts.append(" ")

        def handle_data(self, data: str) -> None:
            if not self.skip:
                self.parts.append(data)

    parser = Text()
    parser.feed(page.read_text())
    return " ".join("".join(parser.parts).split())


# ------------------------------------------------------------ what changed


def test_a_fix_on_a_stand_in_card_says_in_words_that_it_certifies_nothing(tmp_path: Path) -> None:
    """Before: run 1 failed on the real H100; run 2's pass, on a card the driver did not confirm,
    was listed under "what changed" as "fixed: k:v@n1: fail (run 1) → pass", nothing more, at the
    top of the index, where a reviewer reads what the night fixed (the matrix below greyed it).
    Figure: the change says the pass certifies nothing and why (stand-in card)."""
    store = Store(f"sqlite:///{tmp_path}/r.db")
    first = new_run(store)
    store_cell(store, first, "n1", "h100", real=True, outcome="fail")
    store.finish_run(first, "finished", 1)
    second = new_run(store)
    store_cell(store, second, "n1", "h100", real=False, outcome="pass")
    store.finish_run(second, "finished", 0)
    index = render(store, tmp_path / "site")
    changes = text_of(index).split("What changed since the last run", 1)[1].split("Matrix: the fleet", 1)[0]
    assert "fixed: k:v@n1: fail (run 1) → pass" in changes, changes
    assert "stand-in card: certifies nothing" in changes, changes


def test_a_fix_confirmed_on_real_hardware_is_said_plainly(tmp_path: Path) -> None:
    """The other side: a pass on the real card, in a finished run, is a fix with no caveat."""
    store = Store(f"sqlite:///{tmp_path}/r.db")
    first = new_run(store)
    store_cell(store, first, "n1", "h100", real=True, outcome="fail")
    store.finish_run(first, "finished", 1)
    second = new_run(store)
    store_cell(store, second, "n1", "h100", real=True, outcome="pass")
    store.finish_run(second, "finished", 0)
    changes = text_of(render(store, tmp_path / "site")).split("What changed since the last run", 1)[1]
    changes = changes.split("Matrix: the fleet", 1)[0]
    assert "fixed: k:v@n1: fail (run 1) → pass" in changes and "certifies nothing" not in changes, changes


# ------------------------------------------------------------ the matrix, in words


def test_a_grey_cell_of_inputs_since_changed_says_certifies_nothing_in_words(tmp_path: Path) -> None:
    """Before: a pass whose kernel's sources changed since (or whose job did, or whose node left
    the fleet) was grey on the matrix, the legend's "as expected, but certifies nothing", yet its
    words were "pass ... inputs changed since" alone; a stand-in's or an unfinished run's grey cell
    says "certifies nothing", and the run page says it of this very result. Read aloud or printed
    without colour, the index's cell was a pass with a note. Figure: the cell says it."""
    farm = load_farm(toy_farm(tmp_path / "farm"))
    store = Store(farm.database_url)
    run_id = new_run(store)
    # kernel toy on the farm's own node, a real card, identity "b"*64: not the bytes in kernels/ now
    store_cell(store, run_id, "here", "h100", real=True, outcome="pass", kernel="toy", variant="plain")
    store.finish_run(run_id, "finished", 0)
    index = render(store, tmp_path / "site", farm=farm)
    html = index.read_text()
    assert 'class="good unconfirmed' in html and "inputs changed since" in html
    cell = text_of(index).split("toy : plain", 1)[1].split("Certification", 1)[0]
    assert "certifies nothing" in cell, cell


# ------------------------------------------------------------ property: the matrix is the database


class MatrixCells(HTMLParser):
    """index.html's standing cells: (row, node, card) -> class, run, link, words."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str, str], dict[str, str]] = {}
        self.at: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "td" and "data-cell" in a:
            self.at = {**a, "text": "", "href": ""}
        elif tag == "a" and self.at is not None and not self.at["href"]:
            self.at["href"] = a.get("href", "")

    def handle_data(self, data: str) -> None:
        if self.at is not None:
            self.at["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.at is not None:
            self.cells[(self.at["data-cell"], self.at["data-node"], self.at["data-device"])] = self.at
            self.at = None


@dataclass
class History:
    """What was stored: cell -> [(result id, run, outcome, real card)], run -> status."""

    cells: dict[tuple[str, str, str], list[tuple[int, int, str, bool]]] = field(default_factory=dict)
    status: dict[int, str] = field(default_factory=dict)


def random_history(store: Store, rng: random.Random) -> History:
    """1-5 runs; nodes' cards swapped, nodes and variants left out of runs, stand-in probes,
    runs that finished, aborted or never ended (the last one too)."""
    seen = History()
    cards = {node: rng.choice(list(CARDS)) for node in ("n1", "n2", "n3")}
    for _ in range(rng.randint(1, 5)):
        run_id = new_run(store)
        if rng.random() < 0.3:
            cards[rng.choice(list(cards))] = rng.choice(list(CARDS))
        for node, card in cards.items():
            if rng.random() < 0.2:
                continue
            real = rng.random() < 0.8
            for variant in ("v1", "v2", "v3"):
                if rng.random() < 0.25:
                    continue
                outcome = rng.choice(OUTCOMES)
                rid = store_cell(store, run_id, node, card, real=real, outcome=outcome, variant=variant)
                seen.cells.setdefault((f"k:{variant}", node, CARDS[card][0]), []).append((rid, run_id, outcome, real))
        seen.status[run_id] = rng.choice(["finished", "finished", "aborted", "running"])
        if seen.status[run_id] != "running":
            store.finish_run(run_id, seen.status[run_id], 0)
    return seen


@pytest.mark.parametrize("seed", range(12))
def test_every_matrix_cell_is_the_databases_latest_verdict(tmp_path: Path, seed: int) -> None:
    """Property (held before this round; kept as the rule's guard): every cell of index.html is
    its cell's latest verdict on record (the latest result when none is a verdict): its outcome word,
    the run it cites, its link to that result's page, and green exactly where the certification
    rule allows it (as expected; a pass of a card the driver confirmed; of a run that finished; on a
    card its node's latest probe still finds, since review 240).
    Figure: the standing read back from the database, cell by cell, against the rendered page."""
    store = Store(f"sqlite:///{tmp_path}/r.db")
    seen = random_history(store, random.Random(seed))
    index = render(store, tmp_path / "site")
    parser = MatrixCells()
    parser.feed(index.read_text())
    assert len(parser.cells) == len(seen.cells)
    with sqlite3.connect(tmp_path / "r.db") as db:  # the database's word on each run's end, not the test's
        status = dict(db.execute("SELECT id, status FROM runs"))
    assert status == seen.status
    now: dict[str, tuple[int, str]] = {}  # node -> its latest probe's card (each stored cell stores one)
    for (_row, node, card), results in seen.cells.items():
        now[node] = max(now.get(node, (0, "")), (max(r[0] for r in results), card))
    for key, results in seen.cells.items():
        verdicts = [r for r in results if not is_infra(r[2])]
        rid, run_id, outcome, real = (verdicts or results)[-1]
        cell = parser.cells[key]
        assert cell["href"] == f"cells/{rid}.html" and cell["data-run"] == str(run_id), (key, cell)
        assert cell["text"].strip().split()[0] == outcome, (key, cell)
        certifiable = real or outcome not in RAN_AS_EXPECTED
        # a card its node's latest probe no longer finds is not the fleet's (review 240)
        green = is_as_expected(outcome) and certifiable and status[run_id] == "finished" and now[key[1]][1] == key[2]
        classes = cell["class"].split()
        assert (classes[0] == "good" and "unconfirmed" not in classes) == green, (key, cell, status[run_id], real)
        if cell["class"].startswith("good unconfirmed"):
            assert "certifies nothing" in cell["text"], (key, cell)
