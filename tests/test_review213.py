"""Review round 213: leftovers of red-team rounds 207 and 210.

1. A card named with a look-alike letter ("NVIDIA \\u041d100", a Cyrillic En) read as the node's
   real "NVIDIA H100" wherever the terminal told cards apart: `farm nodes`' card column, the
   `farm verify` summary's `node[card]` column heads, its progress lines and its --log. Red-team
   210 showed such names as escapes on pages and in JUnit only (terminal.card_text). The index
   page's data-device attributes held the raw name beside a head showing its escape.
2. A SIGTERM while a node's SSH dial hung (a black-holed address) waited out the node's whole
   connect_timeout: `ssh_dial.dial`'s blocking connect heard nothing of the stop's watchdog cut.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner
from faults import NetnsNode, faults_job, netns_works
from faults import write_fault_farm as write_farm
from nodes import CARDS, Card, nvidia_smi_script, query, smi_on_path
from test_redteam203 import VARIANTS, _blackhole, _stop
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.plan import Cell

H100 = "NVIDIA H100"
LOOK_ALIKE = "NVIDIA \u041dl00".replace("l", "1")  # a Cyrillic En: reads "NVIDIA H100"
CONFUSABLE = str.maketrans({"\u041d": "H"})


def seen(text: str) -> str:
    """What the eye reads: compatibility forms folded, the Cyrillic En as the Latin H."""
    return unicodedata.normalize("NFKC", text).translate(CONFUSABLE)


def two_look_alike_cards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local node whose nvidia-smi lists the real H100 and its look-alike: the toy farm's farm.yaml."""
    cards = [Card(H100, "9.0"), Card(LOOK_ALIKE, "9.0")]
    smi_on_path(tmp_path, nvidia_smi_script(cards), monkeypatch)
    return toy_farm(tmp_path / "farm")


def test_a_cells_label_shows_a_look_alike_card_as_escapes() -> None:
    """Before: "toy:plain@n[NVIDIA \\u041d100]" read "toy:plain@n[NVIDIA H100]" in every progress
    line and the --log. Figure: the two cards' labels read apart."""
    real, fake = (Cell("toy", "plain", "n", card, several=True).label for card in (H100, LOOK_ALIKE))
    assert seen(real) != seen(fake) and "\\u041d" in fake, (real, ascii(fake))


def test_farm_nodes_and_verify_show_look_alike_cards_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `farm nodes` listed "0: NVIDIA H100" and "1: NVIDIA H100"; `farm verify`'s summary
    headed two columns "here[NVIDIA H100]", its progress and --log lines named one cell twice.
    Figure: the look-alike's name carries its escape in each, never what reads as the real card."""
    config = two_look_alike_cards(tmp_path, monkeypatch)
    cli = CliRunner()
    listed = cli.invoke(main, ["nodes", "--config", str(config)])
    rows = [line for line in listed.output.splitlines() if line.startswith("here ")]
    assert len(rows) == 2 and len({seen(" ".join(r.split()[2:5])) for r in rows}) == 2, listed.output
    assert "\u041d" not in listed.output, ascii(listed.output)
    log = tmp_path / "farm.log"
    done = cli.invoke(main, ["verify", "--all", "--no-report", "--log", str(log), "--config", str(config)])
    for text in (done.output, log.read_text()):
        assert "\u041d" not in text and "[NVIDIA \\u041d100]" in text, ascii(text)
    heads = next(line for line in done.output.splitlines() if line.startswith("kernel:variant"))
    assert "here[NVIDIA H100]" in heads and "here[NVIDIA \\u041d100]" in heads, ascii(heads)


def test_quiet_change_lines_name_each_card_as_escapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `--quiet` (the cron mail) said "regression: toy:plain@here: pass (run 1) -> fail"
    twice, the card named in neither. Figure: one line per card, the look-alike's as its escape."""
    config = two_look_alike_cards(tmp_path, monkeypatch)
    cli = CliRunner()
    argv = ["verify", "--all", "--quiet", "--no-report", "--config", str(config)]
    assert cli.invoke(main, argv).exit_code == 0
    (tmp_path / "farm" / "kernels" / "toy.cpp").write_text("int main() { return 1; }\n")
    said = cli.invoke(main, argv).output
    lines = sorted(line.split(":", 3)[1:3] for line in said.splitlines() if line.startswith("regression:"))
    assert lines == [[" toy", "plain@here[NVIDIA H100]"], [" toy", "plain@here[NVIDIA \\u041d100]"]], ascii(said)


def test_the_index_pages_data_device_shows_the_card_as_its_head_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: data-device="NVIDIA \\u041d100" (the raw letter) on a head and its cells whose text
    shows "NVIDIA \\u041d100" as an escape. Figure: the attribute is the escape, as the head."""
    config = two_look_alike_cards(tmp_path, monkeypatch)
    assert CliRunner().invoke(main, ["verify", "--all", "--config", str(config)]).exit_code in (0, 1)
    reports = tmp_path / "farm" / "reports"
    for page in [reports / "index.html", *(reports / "runs").glob("*.html")]:
        devices = re.findall(r'data-device="([^"]*)"', page.read_text())
        assert devices and "\u041d" not in "".join(devices), (page.name, ascii(devices))
        assert "NVIDIA \\u041d100" in devices, (page.name, devices)


def _run_stored(db: Path) -> bool:
    """The farm has stored its run (its database and the run's row are there)."""
    try:
        return db.is_file() and bool(query(db, "SELECT id FROM runs"))
    except sqlite3.Error:
        return False


def test_sigterm_while_a_nodes_dial_hangs_ends_the_farm_within_seconds(tmp_path: Path) -> None:
    """Red-team 207's open item: the node's replies black-holed from the start, the farm dialling it
    with connect_timeout 60 s when SIGTERM comes. Before: the farm ran on until the dial timed out
    (still there 20 s after SIGTERM). Figure: exit 4 within 10 s (the stop's 3 s cut, then the
    run's end), the run aborted, no cell pass, no process of the farm left."""
    why = netns_works()
    assert why is None, f"network namespaces are not usable here ({why}): CI runs as root with iproute2"
    node = NetnsNode("dial", tmp_path / "node", CARDS["t4"])
    node.prepare()
    node.start()
    try:
        entry = node.farm_entry(tmp_path / "work", build_jobs=1, connect_timeout=60)
        root = tmp_path / "farm"
        write_farm(root, {"bh": entry}, [faults_job(VARIANTS, timeout=30)], retries=0, reconnect_window=0.0)
        _blackhole(node)
        # SIGTERM once the run is stored (a loaded machine may take seconds to get there), the dial then
        # under way with its node black-holed
        result = _stop(root, lambda: _run_stored(root / "results.db"), lambda: None, 2)
    finally:
        node.stop()
    assert result["took"] is not None and result["took"] < 10, result
    assert result["code"] == 4, result
    assert result["runs"] == [("aborted", 4)], result
    assert "pass" not in {outcome for _, outcome, _ in result["rows"]}, result
    assert result["left"] == [], result
