"""The README's walkthrough ("One cell, from farm.yaml to its page") holds.

It names six stations, each a module of the farm with one entry point. This
runs one cell through exactly those six calls, in their order, on the toy farm
(a local node with a stand-in T4), and checks that what each hands the next is
what the next one used: the outcome that `classify` returned is the one the
store wrote and the one the cell's page shows. It also checks every module,
file and name the walkthrough mentions still exists, so the text cannot drift
from the code.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from nodes import CARDS, nvidia_smi_script, smi_on_path
from toyfarm import toy_farm

REPO = Path(__file__).resolve().parent.parent
STATIONS = ["config", "plan", "run", "classify", "store", "report"]


def walkthrough() -> list[str]:
    """The walkthrough's numbered steps, each as one line of text."""
    text = (REPO / "README.md").read_text()
    start = text.index("**One cell, from farm.yaml to its page**")
    end = text.index("\n- `kernels/`", start)
    steps = re.split(r"\n(?=\d+\. )", text[start:end])[1:]
    return [" ".join(step.split()) for step in steps]


def test_the_walkthrough_has_six_stations_in_the_pipelines_order() -> None:
    steps = walkthrough()
    assert len(steps) <= 6
    named = [re.match(r"\d+\. `orchestrator\.(\w+)` `(\w+)`", step) for step in steps]
    assert all(named), steps
    assert [m.group(1) for m in named if m] == STATIONS


def test_every_name_the_walkthrough_mentions_exists() -> None:
    for step in walkthrough():
        station = importlib.import_module(re.match(r"\d+\. `(orchestrator\.\w+)`", step).group(1))
        modules = [station]
        for path in re.findall(r"`?([\w/]+\.py)\b", step):
            full = REPO / "orchestrator" / path
            assert full.is_file(), f"the walkthrough names {path}, which does not exist"
            modules.append(importlib.import_module("orchestrator." + path[:-3].replace("/", ".")))
        for name in re.findall(r"`([A-Z_a-z][\w.]*)`", step):
            if name.startswith("orchestrator.") or name.endswith(".py") or name.startswith("reports"):
                continue
            head, *rest = name.split(".")
            owners = [getattr(m, head) for m in modules if hasattr(m, head)]
            owners += [
                getattr(getattr(m, cls), head)
                for m in modules
                for cls in dir(m)
                if isinstance(getattr(m, cls, None), type) and hasattr(getattr(m, cls), head)
            ]
            assert owners, f"{name!r} is in none of {[m.__name__ for m in modules]}"
            for attr in rest:
                assert any(hasattr(o, attr) for o in owners), f"{name!r}: no {attr!r}"


def test_one_cell_through_the_six_stations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator import classify as station4
    from orchestrator.config import load_farm
    from orchestrator.plan import plan_cells
    from orchestrator.report import render
    from orchestrator.run import run_cells, scheduler
    from orchestrator.run.stages import pipeline
    from orchestrator.store import Store

    smi_on_path(tmp_path, nvidia_smi_script(CARDS["t4"]), monkeypatch)
    decided: list[str] = []

    def spied(ev, exp):
        verdict = station4.classify(ev, exp)
        decided.append(verdict.outcome.value)
        return verdict

    monkeypatch.setattr(pipeline, "classify", spied)
    monkeypatch.setattr(scheduler, "classify", spied)
    written: list[str] = []
    add_result = Store.add_result

    def spied_add(self, record, *args, **kwargs):
        written.append(record.outcome)
        return add_result(self, record, *args, **kwargs)

    monkeypatch.setattr(Store, "add_result", spied_add)

    farm = load_farm(toy_farm(tmp_path / "farm"))  # 1
    cells = plan_cells(farm, None, None)  # 2
    assert [(c.kernel, c.variant, c.node) for c in cells] == [("toy", "plain", "here")]
    store = Store(farm.database_url)  # 5, opened before the run that writes to it
    try:
        summary = run_cells(farm, store, cells)  # 3, which calls 4 and 5 per cell
        index = render(store, farm.reports_dir, summary.run_id, farm=farm)  # 6
    finally:
        store.close()
    assert decided == ["pass"]
    assert written == ["pass"]
    assert dict(summary.outcomes) == {"pass": 1}
    pages = list((farm.reports_dir / "cells").glob("*.html"))
    assert len(pages) == 1
    page = pages[0].read_text()
    assert "toy: PASS" in page and ">pass<" in page
    assert pages[0].name in index.read_text()
