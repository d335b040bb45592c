"""Review 108: the reviewers' site read as a reviewer certifying a Hopper kernel.

Two gaps on the index (the page a reviewer opens first), one on history.html:

- A node the farm file lists but that never ran had no column and no word on the site: the
  course's t4, a100 and h100 (farm.yaml) read as if they were not the course's, and an
  "NVIDIA H100" column of a lent machine stood beside a farm.yaml whose own h100 never ran.
  The index now lists each such node, and names the column of the same card as another node's.
- The certification line named the card, node, run and commit but not the driver, nvcc or
  date it ran with (those were a click away, on the kernel page), and only the latest of
  several cards: a CC certified first on an H200, then on an H100, read as H100-only.
- history.html listed runs by trigger, commit and counts: which ran on the lent H100, which on
  the H200 (same triggers, same counts) took opening each run. It names each run's nodes and
  cards now, as that run's probe read them, and its farm file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_report import TOY, certify, toy_identity
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.report.site import render
from orchestrator.store.database import Store

CHROMIUM = "/usr/bin/chromium"

# farm.yaml's course node, never run: the same card as the `hopper` node the results are of
COURSE_H100 = """\
  h100:
    host: h100.example.invalid
    user: farm
    gpu: NVIDIA H100
    cc: "9.0"
    enabled: false
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A farm of `here` (local) and the course's disabled h100, neither ever run, and a
    store whose one run certified toy on the `hopper` node (an NVIDIA H100 of another farm
    file), twice: first on an H200, then on an H100."""
    root = tmp_path_factory.mktemp("review108")
    config = toy_farm(root, source=TOY, cc="{exactly: '9.0'}")
    config.write_text(config.read_text() + COURSE_H100)
    farm = load_farm(config)
    store = Store(farm.database_url)
    store.journal = None
    run_id = store.begin_run(
        trigger="test", farm_version="0", host="h", config_file="other.yaml", selection="--all", farm_commit="c0ffee"
    )
    identity = toy_identity(farm)
    certify(store, run_id, identity, real=True, node="lent200", device="NVIDIA H200", code_path="ptx-jit")
    certify(store, run_id, identity, real=True)
    store.finish_run(run_id, "finished", 0)
    render(store, root / "site", run_id, farm)
    return root / "site" / "index.html"


def test_the_farm_files_nodes_that_never_ran_are_named_on_the_index(site: Path) -> None:
    page = site.read_text()
    assert 'id="unrun"' in page, "the index says nothing of the farm file's nodes that never ran"
    assert "Never run: farm.yaml lists 2 nodes" in page
    assert '<li data-node="here">' in page and '<li data-node="h100">' in page
    # the column of the same card is another node's, not the course's h100
    assert "the NVIDIA H100 column above is hopper, another node, not h100" in page
    assert "(disabled in farm.yaml)" in page


def test_the_certificate_on_the_index_names_driver_nvcc_date_and_the_first_card(site: Path) -> None:
    page = site.read_text()
    line = page.split('data-cc="9.0"', 1)[1].split("</span>", 1)[0]
    assert "latest: NVIDIA H100 on hopper" in line, line
    assert "driver 580.1," in line and "nvcc 13.0.88" in line, line
    assert "farm at c0ffee" in line, line
    assert "first: NVIDIA H200 on lent200" in line, line
    # a pass through PTX compiled at load is not the build's own machine code: said where it certifies
    assert line.count(", code ptx-jit") == 1 and line.index(", code ptx-jit") > line.index("first:"), line


def test_a_reviewer_sees_both_in_chromium(site: Path) -> None:
    """Read in the browser as a reviewer reads it (no JavaScript): the never-run list is shown
    right under the matrix, before the certification, and the certificate's line is readable."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless=new"])
        try:
            page = browser.new_page(java_script_enabled=False, viewport={"width": 800, "height": 900})
            page.goto(site.as_uri())
            unrun = page.locator("#unrun-nodes li[data-node='h100']")
            assert unrun.is_visible()
            assert "another node, not h100" in unrun.inner_text()
            matrix_bottom = page.locator("#matrix").bounding_box()
            ledger_top = page.locator("#ledger").bounding_box()
            note = page.locator("#unrun").bounding_box()
            assert matrix_bottom and ledger_top and note
            assert matrix_bottom["y"] + matrix_bottom["height"] <= note["y"] < ledger_top["y"]
            cert = page.locator("#ledger [data-cc='9.0'] small.cert").inner_text()
            assert "driver 580.1" in cert and "nvcc 13.0.88" in cert, cert
        finally:
            browser.close()


def test_history_names_each_runs_nodes_cards_and_farm_file(site: Path) -> None:
    """Which runs were on which card took opening every run's page: the lent H100's runs and
    the H200's share triggers and counts."""
    page = (site.parent / "history.html").read_text()
    assert "<th>nodes: cards" in page, "history.html does not say what each run ran on"
    row = page.split('<tr data-run="1">', 1)[1].split("</tr>", 1)[0]
    assert row.count("hopper: NVIDIA H100<br>") == 1, row  # one line a node, though probed twice
    assert "<small>other.yaml</small>" in row, row


def test_card_words_never_read_a_stand_in_or_an_unreachable_node_as_the_card() -> None:
    from types import SimpleNamespace

    from orchestrator.report.run_cards import card_words

    def snap(**fields: object) -> Any:
        base = {"node": "t4", "gpu_name": "Tesla T4", "gpu_count": 1, "real_gpu": True, "probe_error": None}
        return SimpleNamespace(**{**base, **fields})

    assert card_words(snap()) == "t4: Tesla T4"
    assert card_words(snap(real_gpu=False)) == "t4: Tesla T4 (stand-in)"
    assert card_words(snap(probe_error="ssh: timed out")) == "t4: unreachable"
    assert card_words(snap(gpu_name=None, real_gpu=False)) == "t4: no GPU"
    assert card_words(snap(gpu_count=2, gpu_name="NVIDIA H200")) == "t4: 2× NVIDIA H200"


def test_a_runs_page_names_each_columns_card_and_the_farm_commit(site: Path) -> None:
    """A run's own matrix headed its columns by node name alone (the card only where a node held
    several models) and named no commit: 'h100-lent' read beside farm.yaml's 'h100'."""
    page = (site.parent / "runs" / "1.html").read_text()
    assert '<th data-node="hopper">hopper<small>NVIDIA H100</small></th>' in page, page
    assert '<th data-node="lent200">lent200<small>NVIDIA H200</small></th>' in page, page
    assert "farm at <code>c0ffee</code>, farm file other.yaml." in page, page


def test_a_junit_case_names_its_card_and_whether_the_driver_confirmed_it(site: Path) -> None:
    """A JUnit testcase was named by its node alone: a CI reader could not tell the card."""
    import xml.etree.ElementTree as ET

    from orchestrator.report import export
    from orchestrator.report.model import collect

    farm = load_farm(site.parent.parent / "farm.yaml")
    tree = ET.fromstring(export.junit(collect(Store(farm.database_url), 1, farm, full=True)))
    found = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in tree.iter("testcase")
    }
    assert found["hopper"] == {"gpu": "NVIDIA H100", "cc": "9.0", "real_gpu": "true"}, found
    assert found["lent200"]["gpu"] == "NVIDIA H200", found
