"""Review 200: `farm report --run N --out DIR`, an older run's report rendered later, after real runs on the
loopback sshd fleet (t4, a100, h100: nvidia-smi stand-ins, taken as confirmed by the driver by setting
`real_gpu` in the database, as test_review197 does). Run 1: the H100 fails; run 2: every card passes;
run 3: every card passes, its passes stored as run unconfined on the farm's own machine.

Findings (before -> after):

1. The page of run 1 showed the matrix as of run 1 (the H100's fail) but the certification ledger of
   every run: "CC 9.0: VERIFIED" on run 2's pass, beside "the latest result of these same inputs there
   is fail" (now-failing), and JSON's ledger the same; `store.certifying_groups` had no cut-off at the
   rendered run. The ledger is now as of the end of the rendered run: CC 9.0 is not VERIFIED (failing).
2. So too the ledger's `farm-writable` flag (`store.farm_writable_passes`): run 2's kernel page counted
   run 3's unconfined passes. It counts those up to the rendered run now.
3. No page of an older run's report (index, kernel, node, history), nor its JSON or JUnit export, said a
   newer run exists. Each says now that it is run N's report and which runs are newer.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from nodes import Fleet, standin_job, standin_variant, write_farm

from orchestrator.cli import main


def text(page: Path) -> str:
    """A page's words, as a reader sees them (no tags)."""
    body = page.read_text().split("<body>", 1)[1]
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


class Farm:
    """The stand-in kernel on t4, a100 and h100; a node fails while its flag file is there."""

    def __init__(self, fleet: Fleet, root: Path) -> None:
        self.root = root
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
        self.cli = CliRunner()

    def verify(self, *fail: str, unconfined: bool = False) -> None:
        for node in ("t4", "a100", "h100"):
            (self.flags / f"fail-{node}").unlink(missing_ok=True)
        for node in fail:
            (self.flags / f"fail-{node}").touch()
        self.cli.invoke(main, ["verify", "--all", "--no-report", "--config", str(self.config)])
        with sqlite3.connect(self.db) as db:  # the cards taken as confirmed by the driver
            db.execute("UPDATE results SET real_gpu = 1")
            db.execute("UPDATE node_snapshots SET real_gpu = 1")
            if unconfined:  # the latest run's passes, as if run unconfined on the farm's own machine
                db.execute("UPDATE results SET farm_writable = 1 WHERE run_id = (SELECT max(id) FROM runs)")

    def report(self, *args: str) -> str:
        done = self.cli.invoke(main, ["report", "--config", str(self.config), *args])
        assert done.exit_code in (0, 1), done.output  # 1: a cell not as expected
        return done.output

    def site(self, run: int) -> Path:
        out = self.root / f"site-{run}"
        if not out.exists():
            self.report("--run", str(run), "--out", str(out))
        return out


@pytest.fixture(scope="module")
def three_runs(ssh_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    made = Farm(ssh_fleet, tmp_path_factory.mktemp("review200"))
    made.verify("h100")
    made.verify()
    made.verify(unconfined=True)
    with sqlite3.connect(made.db) as db:
        runs = [tuple(r) for r in db.execute("SELECT id, status FROM runs ORDER BY id")]
        h100 = [tuple(r) for r in db.execute("SELECT run_id, outcome FROM results WHERE node = 'h100' ORDER BY id")]
    assert runs == [(1, "finished"), (2, "finished"), (3, "finished")], runs
    assert h100 == [(1, "fail"), (2, "pass"), (3, "pass")], h100
    yield made


def ledger_of(index: str) -> str:
    return index[index.index("Certification") : index.index("Legend")]


def test_an_older_runs_ledger_is_as_of_its_end(three_runs: Farm) -> None:
    """Before: run 1's page (the H100 failing in its matrix) read "CC 9.0: VERIFIED" on run 2's pass,
    beside "the latest result of these same inputs there is fail"; JSON's ledger the same.
    Figure: --run 1 --out DIR: CC 7.5 and 8.0 VERIFIED, CC 9.0 not (failing), no result of run 2 cited."""
    site = three_runs.site(1)
    index = text(site / "index.html")
    ledger = ledger_of(index)
    assert "CC 7.5: VERIFIED" in ledger and "CC 8.0: VERIFIED" in ledger, ledger
    assert "CC 9.0: VERIFIED" not in ledger and "CC 9.0 is not VERIFIED" in ledger, ledger
    assert "of run 2" not in ledger and "of run 3" not in ledger, ledger
    kernel = text(site / "kernels" / "standin.html")
    assert "CC 9.0 is not VERIFIED" in kernel and "now-failing" not in kernel, kernel
    exported = json.loads(three_runs.report("--format", "json", "--run", "1"))
    (entry,) = exported["ledger"]
    assert [f["kind"] for f in entry["flags"]] == ["failing"], entry["flags"]
    assert "9.0" not in [cc for cc, state in entry["capabilities"].items() if state["state"] == "VERIFIED"], entry


def test_an_older_runs_farm_writable_flag_counts_its_runs_alone(three_runs: Farm) -> None:
    """Before: run 2's kernel page flagged `farm-writable` "1 pass of these inputs (latest: result N)"
    on each CC: run 3's passes, stored after it. Figure: --run 2: no farm-writable flag; --run 3: one per CC."""
    assert "ran unconfined on the farm's own machine" not in text(three_runs.site(2) / "kernels" / "standin.html")
    flags = json.loads(three_runs.report("--format", "json", "--run", "2"))["ledger"][0]["flags"]
    assert [f["kind"] for f in flags] == [], flags
    latest = json.loads(three_runs.report("--format", "json"))["ledger"][0]["flags"]
    assert [f["kind"] for f in latest] == ["farm-writable"] * 3, latest


def test_an_older_runs_pages_say_newer_runs_exist(three_runs: Farm) -> None:
    """Before: run 1's index, kernel, node and history pages said nowhere that runs 2 and 3 exist, nor
    its JSON or JUnit export. Figure: each says "2 newer runs ... (the latest: run 3)"; the latest run's say nothing."""
    site = three_runs.site(1)
    said = "This is run 1's report, as of its end: 2 newer runs are on record (the latest: run 3)"
    for page in ("index.html", "kernels/standin.html", "nodes/h100.html", "history.html"):
        words = text(site / page)
        assert said in words, (page, words)
    exported = json.loads(three_runs.report("--format", "json", "--run", "1"))
    assert exported["newer_runs"] == {"count": 2, "latest": 3}, exported["newer_runs"]
    junit = three_runs.report("--format", "junit", "--run", "1")
    assert '<property name="newer_runs" value="2 (the latest: run 3)" />' in junit, junit
    # nothing else of runs 2 and 3 on any page of run 1's report: the grids, trends, history, node pages
    for page in sorted(site.rglob("*.html")):
        words = text(page).replace("newer runs are on record (the latest: run 3)", "")
        assert not re.search(r"\bruns? [23]\b", words), (page, words)
        assert not re.search(r"runs/[23]\.html", page.read_text()), page
    latest = three_runs.site(3)
    assert "newer runs" not in text(latest / "index.html")
    assert json.loads(three_runs.report("--format", "json"))["newer_runs"] is None
    assert "newer_runs" not in three_runs.report("--format", "junit")
