"""Review round 97, a reviewer certifying course kernels from the report and its exports.

1. A kernel removed or renamed that never passed on a confirmed card kept its certification row,
   "kernels/toy.cpp ... CC 7.5: unverified", with no word that the course no longer has it: the
   `removed` flag was raised only on a CC VERIFIED (round 56), so the row read as a live kernel
   still waiting for its card.
2. The certification table said "CC 7.5: VERIFIED" and nothing of which card, run or farm commit:
   the kernel page's certificate named its run and card but not the farm commit of that run (the
   commit that holds the kernel's bytes in this repository), nor did the JSON export's certificate.
3. A run's own page (runs/ID.html) and a kernel page's history grid drew a pass that certifies
   nothing (a stand-in card, a run that did not finish) as the word "pass" in a grey hatched cell:
   colour alone, no word on the page said so (the index's matrix does), and the run page had no
   legend.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from nodes import CARDS, nvidia_smi_script, smi_on_path
from test_redteam56 import chromium_page, green_on_a_t4
from toyfarm import toy_farm

from orchestrator.cli import main


def _rename_toy(root: Path) -> None:
    (root / "kernels" / "toy.cpp").rename(root / "kernels" / "toy2.cpp")
    job = (root / "jobs" / "toy.yaml").read_text().replace("toy.cpp", "toy2.cpp").replace("kernel: toy", "kernel: toy2")
    (root / "jobs" / "toy.yaml").unlink()
    (root / "jobs" / "toy2.yaml").write_text(job)


def _ledger_rows(index: Path) -> dict[str, str]:
    """kernel -> its certification row and the flag rows under it (index.html)."""
    section = index.read_text().split('<section id="ledger">', 1)[1].split("</section>", 1)[0]
    rows = re.split(r'(?=<tr data-kernel=")', section)[1:]
    return {re.match(r'<tr data-kernel="([^"]+)"', row).group(1): row for row in rows}  # type: ignore[union-attr]


def test_a_removed_kernel_that_never_passed_is_flagged_removed_not_left_unverified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """toy ran on a stand-in T4 only (nothing certified), then the course renamed it toy2: the
    ledger kept toy's row "CC 7.5: unverified" with no flag, a kernel the course no longer has
    read as one still waiting for its card."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path / "farm")
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    _rename_toy(tmp_path / "farm")
    done = cli.invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 0, done.output
    index = tmp_path / "farm" / "reports" / "index.html"
    rows = _ledger_rows(index)
    assert 'data-flag="removed"' in rows["toy"], rows["toy"]
    assert 'data-flag="removed"' not in rows["toy2"], rows["toy2"]
    page = (tmp_path / "farm" / "reports" / "kernels" / "toy.html").read_text()
    assert 'data-flag="removed"' in page
    exported = json.loads(cli.invoke(main, ["report", "--format", "json", "--config", str(config)]).output)
    (toy,) = [e for e in exported["ledger"] if e["kernel"] == "toy"]
    assert "removed" in [f["kind"] for f in toy["flags"]], toy["flags"]


def test_a_certificate_names_its_card_run_and_farm_commit_on_the_index_kernel_page_and_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reviewer reads "CC 7.5: VERIFIED" on the index: on which card, by which run, at which
    commit of the farm (whose kernels/ holds the bytes) must be there, and in the JSON."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch)
    commit = "0123456789abcdef0123456789abcdef01234567"
    with sqlite3.connect(tmp_path / "farm" / "results.db") as db:
        db.execute("UPDATE runs SET farm_commit = ?", (commit,))
    assert cli.invoke(main, ["report", "--config", str(config)]).exit_code == 0
    reports = tmp_path / "farm" / "reports"
    row = _ledger_rows(reports / "index.html")["toy"]
    verified = re.search(r'<span class="verified" data-cc="7.5">(.*?)</span>', row, re.S)
    assert verified is not None, row
    said = " ".join(re.sub(r"<[^>]+>", "", verified.group(1)).split())
    assert "Tesla T4" in said and "run 1" in said and commit[:12] in said, said
    page = (reports / "kernels" / "toy.html").read_text()
    assert commit[:12] in page.split('id="certification"', 1)[1], page
    exported = json.loads(cli.invoke(main, ["report", "--format", "json", "--config", str(config)]).output)
    (toy,) = exported["ledger"]
    (cert,) = toy["capabilities"]["7.5"]["certificates"]
    assert cert["farm_commit"] == commit, cert


def test_a_pass_that_certifies_nothing_says_so_in_words_on_the_run_page_and_kernel_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in T4 (not confirmed by a driver): the run page and the kernel page's history drew
    its pass as "pass" in a grey cell, colour alone; a reviewer reading the words (a screen reader,
    a black-and-white print, a copy into a review) read a pass."""
    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path / "farm")
    done = CliRunner().invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 0, done.output
    reports = tmp_path / "farm" / "reports"
    with chromium_page() as page:
        page.goto((reports / "runs" / "1.html").as_uri())
        text = page.locator("table#matrix td.unconfirmed").first.inner_text()
        assert "pass" in text and "certifies nothing" in text, text
        assert page.locator("#legend").count() == 1
        page.goto((reports / "kernels" / "toy.html").as_uri())
        text = page.locator("table#kernel-history td.unconfirmed").first.inner_text()
        assert "certifies nothing" in text, text


def test_the_json_ledger_says_certified_false_where_a_flag_voids_a_verified_cc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI step reads the JSON ledger's `state` for "is toy certified on CC 7.5": it said
    "VERIFIED" after the course raised `cc: min` to 8.0 (the T4 must now be refused), the
    contract-changed flag in a list of prose beside it. One field must say it: `certified`."""
    config, cli = green_on_a_t4(tmp_path, monkeypatch)

    def capability() -> dict:
        exported = json.loads(cli.invoke(main, ["report", "--format", "json", "--config", str(config)]).output)
        (toy,) = exported["ledger"]
        return toy["capabilities"]["7.5"]

    assert capability()["certified"] is True and capability()["voided_by"] == []
    job = tmp_path / "farm" / "jobs" / "toy.yaml"
    job.write_text(job.read_text().replace("min: '7.5'", "min: '8.0'"))
    found = capability()
    assert found["state"] == "VERIFIED" and found["certified"] is False, found
    assert found["voided_by"] == ["contract-changed"], found
