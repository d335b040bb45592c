"""Red-team round 210: what the reviewer reads against look-alike text from nodes and kernels.

1. Unicode spaces (U+00A0 no-break space, U+2000-U+200A, U+202F, U+205F, U+3000, U+1680) were
   printed raw on pages and in the terminal: a node whose nvidia-smi named its card
   "NVIDIA\\u00a0H100" headed a matrix column of its own that read "NVIDIA H100", beside the
   node's real "NVIDIA H100" column: two columns of one node, one red, one green, that read alike.
2. A card name with a letter of another script ("NVIDIA \\u041d100", a Cyrillic En) read as
   "NVIDIA H100" in the matrix's and the run page's column heads, on the cell page and in JUnit,
   whose testcase names ("hopper[NVIDIA H100]") also carried the invisible characters round 89
   showed on pages only (U+200B): Jenkins listed testcases of one name, one failed, one passed.
3. JUnit wrote each character XML 1.0 cannot carry (a kernel's ESC, NUL) as U+FFFD, the mark of an
   undecodable byte: "\\x1b[2K\\r ok pass" (a kernel erasing a terminal line) read "\\ufffd[2K ok
   pass" in <system-out>, where every page shows "\\x1b[2K".
"""

from __future__ import annotations

import re
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_report import TOY, certify, toy_identity
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.report import export
from orchestrator.report.model import collect
from orchestrator.report.site import render
from orchestrator.store.database import Store
from orchestrator.terminal import printable, printable_on_page

BUILT = "g++ -O1 -o /w/toy kernels/toy.cpp"  # the toy job's build as run: no "job changed since"
H100 = "NVIDIA H100"
SPACES = ["\u00a0", "\u1680", "\u2000", "\u2003", "\u2007", "\u2009", "\u200a", "\u202f", "\u205f", "\u3000"]
# each reads "NVIDIA H100" to the eye; the first is the node's real card
CARDS = [H100, "NVIDIA\u00a0H100", "NVIDIA \u041d100", "NVIDIA H100\u200b", "NVIDIA H\uff11\uff10\uff10"]
CONFUSABLE = str.maketrans({"\u041d": "H", "\u0397": "H", "\u0406": "I", "\u0410": "A"})


def seen(text: str) -> str:
    """What the eye reads: compatibility forms folded (fullwidth digits), look-alike letters of
    other scripts as the Latin ones, any space as a space, characters drawn as nothing dropped."""
    text = unicodedata.normalize("NFKC", text).translate(CONFUSABLE)
    return "".join(" " if c.isspace() else c for c in text if unicodedata.category(c) != "Cf")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One finished run: toy:plain on node hopper's five look-alike cards (the second fails, its
    stdout erasing a terminal line). Its site, rendered, and its JUnit export."""
    root = tmp_path_factory.mktemp("rt210")
    farm = load_farm(toy_farm(root, source=TOY, cc="{exactly: '9.0'}"))
    store = Store(farm.database_url)
    store.journal = None
    try:
        run_id = store.begin_run(trigger="test", farm_version="0", host="h", config_file="x", selection="--all")
        for i, card in enumerate(CARDS):
            fields: dict = {"device": card, "gpu_uuid": f"GPU-{i}"}
            if i == 1:
                fields.update(outcome="fail", reason="exit 1", stdout=b"toy: FAIL\x00\x1b[2K\r ok pass\n")
            certify(store, run_id, toy_identity(farm), real=True, build_command=BUILT, **fields)
        store.finish_run(run_id, "finished", 1)
        render(store, root / "reports")
        junit = export.junit(collect(store, run_id, farm))
    finally:
        store.close()
    yield root / "reports", junit


@pytest.mark.parametrize("space", SPACES)
def test_unicode_spaces_are_shown_as_escapes(space: str) -> None:
    """Before: "NVIDIA\\u00a0H100" came back as it was, from both. Figure: the escape, as U+200B's."""
    for shown in (printable_on_page(f"NVIDIA{space}H100"), printable(f"NVIDIA{space}H100")):
        assert space not in shown and seen(shown) != H100 and shown.startswith("NVIDIA\\"), ascii(shown)
    assert printable_on_page("a b\tc\nd") == "a b\tc\nd"  # a space, a tab and a newline stay


def column_heads(page: Path, pattern: str) -> list[str]:
    text = page.read_text()
    return [re.sub(r"<[^>]+>", "", m) for m in re.findall(pattern, text, re.S)]


def test_look_alike_card_names_read_apart_in_the_matrix_and_run_page(site: tuple[Path, str]) -> None:
    """Before: the matrix's five column heads of node hopper read "NVIDIA H100" each (a no-break
    space, a Cyrillic En, fullwidth digits), one of them red. Figure: five names that read apart."""
    reports, _junit = site
    heads = column_heads(reports / "index.html", r'<th data-node="hopper"[^>]*>.*?<small>(.*?)</small>')
    assert len(heads) == len(CARDS), heads
    assert len({seen(h) for h in heads}) == len(CARDS), [ascii(h) for h in heads]
    (run_page,) = (reports / "runs").glob("*.html")
    heads = column_heads(run_page, r'<th data-node="hopper">hopper<small>(.*?)</small>')
    assert len({seen(h) for h in heads}) == len(CARDS), [ascii(h) for h in heads]
    titles = [re.search(r"<h1>(.*?)</h1>", p.read_text(), re.S) for p in (reports / "cells").glob("*.html")]
    assert len({seen(t.group(1)) for t in titles if t}) == len(CARDS), titles


def test_junit_testcases_of_look_alike_cards_read_apart(site: tuple[Path, str]) -> None:
    """Before: testcases "hopper[NVIDIA H100]" five times in Jenkins' list (one failed), their
    names differing by a zero-width space, a no-break space, a Cyrillic letter. Figure: apart."""
    _reports, junit = site
    cases = [c for c in ET.fromstring(junit).iter("testcase") if c.get("classname") == "toy.plain"]
    names = [c.get("name") or "" for c in cases]
    assert len({seen(n) for n in names}) == len(CARDS), [ascii(n) for n in names]
    gpus = [p.get("value") or "" for c in cases for p in c.iter("property") if p.get("name") == "gpu"]
    assert len({seen(g) for g in gpus}) == len(CARDS), [ascii(g) for g in gpus]


def test_junit_shows_a_kernels_control_characters_as_escapes(site: tuple[Path, str]) -> None:
    """Before: <system-out> held "toy: FAIL\\ufffd\\ufffd[2K\\r ok pass", as if two bytes were not
    UTF-8. Figure: "toy: FAIL\\x00\\x1b[2K", as the cell page and `farm show` print it."""
    _reports, junit = site
    outs = [o.text or "" for o in ET.fromstring(junit).iter("system-out")]
    (out,) = [o for o in outs if "FAIL" in o]
    assert "\ufffd" not in out and "toy: FAIL\\x00\\x1b[2K" in out, ascii(out)
