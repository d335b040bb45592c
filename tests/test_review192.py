"""Review round 192: the run's masker is built once (its key-line set and patterns grow with the
fleet's key files, and were built again for every record); each record still counts its own masks."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from farm_cli import farm
from nodes import Fleet, query, standin_job, standin_variant
from test_verdicts import run


def test_each_cell_counts_only_its_own_masked_values(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """Three cells print the same token twice each. Figure: each cell's note says 2, the run's shared
    masker's count never carried from one record to the next (it would say 2, 4, 6)."""
    token = "hf_" + secrets.token_hex(12)
    prelude = tmp_path / "show.sh"
    prelude.write_text('echo "token $HF_TOKEN"; echo "again $HF_TOKEN"\n')
    variants = {f"v{i}": standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude) for i in range(3)}
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env={"HF_TOKEN": token})
    config = make_farm(tmp_path, {"t4": node}, [standin_job("standin", variants)])
    _, summary = run(config)
    assert summary.outcomes == {"pass": 3}, summary.outcomes
    rows = query(tmp_path / "results.db", "SELECT stdout, stage_details FROM results")
    assert len(rows) == 3
    for row in rows:
        assert token.encode() not in bytes(row["stdout"]) and bytes(row["stdout"]).count(b"***") == 2
        masked = json.loads(row["stage_details"])["masked"]
        assert masked["count"] == 2 and "2 occurrences" in masked["detail"], masked


def test_a_farm_started_where_no_farm_yaml_is_says_how_to_name_it(tmp_path: Path) -> None:
    """Cron starts `farm verify --all` in its user's HOME. Before: "found no such file; expected the
    farm's configuration (farm.yaml) (a YAML file)", no word of how to point at the real one.
    Figure: exit 3 naming the path, --config, FARM_CONFIG and why (cron's HOME)."""
    env = {k: v for k, v in os.environ.items() if k != "FARM_CONFIG"}
    done = farm("verify", "--all", cwd=tmp_path, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    said = done.stderr
    assert str(tmp_path / "farm.yaml") in said and "no such file" in said, said
    assert "--config" in said and "FARM_CONFIG" in said and "HOME" in said, said
