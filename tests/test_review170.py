"""Review round 170: the attempt of a cell whose module was reloaded under it says so.

Round 157 made such a cell the node's infra-error (no verdict on a driver the probe never saw), but
its attempt was stored as an `ok` try and counted as a success for the node's health (review 161's
note): `farm show` listed an infra-error cell whose only attempt was fine.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nodes import standin_job, standin_variant
from test_redteam157 import PROBED, RELOADED, _node
from test_verdicts import MIN75, rows, run


def test_a_reloaded_cells_attempt_is_the_nodes(make_farm, tmp_path: Path) -> None:
    """Before: the attempt ("ok", no stage, no error). Figure: ("infra", "run", the reload's words)."""
    prelude = tmp_path / "reload.sh"
    prelude.write_text(f"printf '%s\\n' '{RELOADED}' > /proc/driver/nvidia/version\n")
    node = _node(tmp_path / "node", PROBED)
    node.start()
    try:
        variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
        entry = node.farm_entry(tmp_path / "work")
        config = make_farm(tmp_path / "farm", {"reloads": entry}, [standin_job("standin", {"v": variant})], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    db = tmp_path / "farm" / "results.db"
    [row] = rows(db, summary.run_id).values()
    assert row["outcome"] == "infra-error", row["reason"]
    with sqlite3.connect(db) as connection:
        tries = connection.execute(
            "SELECT status, stage, error FROM attempts WHERE run_id = ? AND kernel IS NOT NULL", (summary.run_id,)
        ).fetchall()
    assert len(tries) == 1, tries
    status, stage, error = tries[0]
    assert (status, stage) == ("infra", "run"), tries
    assert "535.104.05" in (error or ""), tries
