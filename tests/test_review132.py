"""Review 132: a speed baseline is the card's own, on a real sshd node.

Found on the lent H200 (session 36, runs 123/124, `bench/hopper-2026-12-06-session36-h200.log`):
each lease is another machine under the node name `h200`, and the cold run judged
cutlass_gemm perf-regression, "1.837 s is 53 % worse than the median 1.2 of its last 5
results", the median being other machines' (other cards', other hosts') seconds: a nightly
run red, exit 1, for no change of the kernel's. A node whose card is swapped (an RMA, a
node's card moved) was judged the same way.

Now a value is judged against the cell's earlier values on the same card (its UUID, where
the farm knows the card the run had): a swapped card starts its own baseline (no verdict
until it has 5), and a slowdown on the card that made the baseline is perf-regression as
before. The words say "on this card".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nodes import CARDS, SshNode, nvidia_smi_script, query, write_farm
from test_metrics import SPEEDY, speedy_job

from orchestrator.config.farm import load_farm
from orchestrator.errors import EXIT_OK, EXIT_UNEXPECTED
from orchestrator.plan import plan_cells
from orchestrator.run.scheduler import run_cells
from orchestrator.store.database import Store


def test_a_swapped_card_starts_its_own_baseline_and_the_first_card_still_judges_its_slowdown(tmp_path: Path) -> None:
    node = SshNode("t4", tmp_path / "node", CARDS["t4"])
    node.prepare()
    node.start()
    first = node.card
    assert first is not None
    swapped = dataclasses.replace(first, salt="the card put in after an RMA")
    assert swapped.uuid(0) != first.uuid(0)
    root = tmp_path / "farm"
    try:
        config = write_farm(root, {"t4": node.farm_entry(root / "node-t4")}, [speedy_job(root)])
        (root / "kernels" / "speedy.cpp").write_text(SPEEDY)
        (root / "calls.txt").write_text("100\n")
        runs = [(first, 100), (first, 101), (first, 99), (first, 100), (first, 102), (swapped, 70), (first, 70)]
        codes = []
        for card, gflops in runs:
            (node.node_bin / "nvidia-smi").write_text(nvidia_smi_script(card))
            (root / "gemm.txt").write_text(f"{gflops}\n")
            farm = load_farm(config)
            store = Store(farm.database_url)
            try:
                codes.append(run_cells(farm, store, plan_cells(farm), cache_dir=tmp_path / "archives").exit_code)
            finally:
                store.close()
    finally:
        node.stop()
    rows = query(
        root / "results.db",
        "select run_id, outcome, reason, gpu_uuid from results where variant = 'gemm' order by run_id",
    )
    assert [r["gpu_uuid"] for r in rows] == [first.uuid(0)] * 5 + [swapped.uuid(0), first.uuid(0)]
    # run 6: 30 % below the first card's median, on a card with no values of its own: no verdict
    assert rows[5]["outcome"] == "pass", rows[5]
    assert rows[5]["reason"] == "exit 0 and the pass marker on stdout (line 3)", rows[5]["reason"]
    # run 7: the first card again, 30 % below its own median: perf-regression, as ever
    assert rows[6]["outcome"] == "perf-regression", rows[6]
    assert "70 GFLOP/s is 30 % worse than the median 100 of its last 5 results on this card" in rows[6]["reason"]
    assert codes == [EXIT_OK] * 6 + [EXIT_UNEXPECTED]
    stored = query(
        root / "results.db",
        "select m.run_id, m.baseline, m.regressed from metric_values m join results r on r.id = m.result_id "
        "where r.variant = 'gemm' and m.name = 'gflops' order by m.run_id",
    )
    assert [(m["run_id"], m["baseline"], m["regressed"]) for m in stored][5:] == [(6, None, 0), (7, 100.0, 1)]
