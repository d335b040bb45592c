"""A node's records in one write, and the recorded binaries read once per run (issue 11, session 33)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nodes import query
from sqlalchemy import event
from test_records import columns_of, full_result

from orchestrator.store.database import Store
from orchestrator.store.journal import Journal
from orchestrator.store.records import AttemptRecord, SnapshotRecord


def snapshot_of(run_id: int, node: str = "h100") -> SnapshotRecord:
    return SnapshotRecord(
        run_id=run_id,
        node=node,
        transport="ssh",
        address=f"farm@{node}:22",
        gpu_name="NVIDIA H100",
        cc="9.0",
        gpu_count=1,
        real_gpu=True,
        bytes_shipped=1024,
        gpus=[{"index": 0, "uuid": "GPU-3", "name": "NVIDIA H100", "cc": "9.0", "memory": "80 GiB"}],
    )


def test_a_nodes_attempt_and_snapshot_in_one_write_are_the_two_writes_they_were(tmp_path: Path) -> None:
    """add_node_records stores and journals what add_attempt then add_snapshot did, row for
    row and record for record (a result refers to its snapshot by the journal's ref)."""
    rows = {}
    for way in ("apart", "together"):
        store = Store(f"sqlite:///{tmp_path / way}.db")
        store.journal = Journal(tmp_path / way, "tok")
        run_id = store.begin_run(token="tok", trigger="t", farm_version="t", host="h", config_file="f", selection="s")
        attempt = AttemptRecord(run_id=run_id, node="h100", attempt=2, status="ok")
        if way == "apart":
            store.add_attempt(attempt)
            snapshot_id = store.add_snapshot(snapshot_of(run_id))
        else:
            snapshot_id = store.add_node_records(attempt, snapshot_of(run_id))
        store.add_result(full_result(run_id, snapshot_id))
        store.finish_run(run_id, "finished", 0)
        store.close()
        kinds = [line.split('"kind":"', 1)[1].split('"', 1)[0] for line in (tmp_path / way / "tok.jsonl").open()]
        assert kinds == ["run", "attempt", "snapshot", "result", "finish"]
        fresh = Store(f"sqlite:///{tmp_path / way}-imported.db")
        fresh.import_journal(tmp_path / way / "tok.jsonl")
        fresh.close()
        for db in (f"{way}.db", f"{way}-imported.db"):
            rows[db] = {t: columns_of(tmp_path / db, t, {"id", "at"}) for t in ("node_snapshots", "attempts")}
            (row,) = query(tmp_path / db, "select r.snapshot_id = s.id as same from results r, node_snapshots s")
            assert row["same"]
    assert rows["together.db"] == rows["apart.db"] == rows["together-imported.db"] == rows["apart-imported.db"]
    assert rows["together.db"]["attempts"] and rows["together.db"]["node_snapshots"]


def test_recorded_binaries_are_read_once_for_every_node_of_the_run(tmp_path: Path) -> None:
    """One query answers every node of the run's plan for the keys asked; a key no node asked
    before is read again; and a result this run writes is what a later ask reads, the latest
    row winning as in the query itself."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = Store(url)
    fields = {"token": "t", "trigger": "t", "farm_version": "t", "host": "h", "config_file": "f", "selection": "s"}
    run_id = store.begin_run(**fields)
    for node, key, sha in [("a", "k1", "1"), ("a", "k1", "2"), ("b", "k1", "3"), ("b", "k2", "4"), ("c", "k1", "5")]:
        result = dataclasses.replace(full_result(run_id, None), node=node, build_key=key, binary_sha256=sha * 64)
        store.add_result(result)
    store.finish_run(run_id, "finished", 0)
    store.close()

    store = Store(url)
    selects: list[str] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def counted(_conn, _cursor, statement: str, *_args) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "binary_sha256" in statement:
            selects.append(statement)

    planned = [("gemm", "a", node, "") for node in ("a", "b")]
    run_id = store.begin_run(planned=planned, **{**fields, "token": "u"})
    assert store.recorded_binaries("a", ["k1", "k2"]) == {"k1": "2" * 64, "k2": None}
    assert store.recorded_binaries("b", ["k2", "k1"]) == {"k2": "4" * 64, "k1": "3" * 64}
    assert store.recorded_binary("b", "k1") == "3" * 64
    assert len(selects) == 1
    assert store.recorded_binaries("c", ["k1"]) == {"k1": "5" * 64}  # a node the plan did not name
    assert store.recorded_binaries("a", ["k3"]) == {"k3": None}
    assert len(selects) == 3
    store.add_result(dataclasses.replace(full_result(run_id, None), node="a", build_key="k1", binary_sha256="6" * 64))
    store.add_result(dataclasses.replace(full_result(run_id, None), node="b", build_key="k9", binary_sha256="7" * 64))
    assert store.recorded_binaries("a", ["k1"]) == {"k1": "6" * 64}
    assert store.recorded_binaries("b", ["k9"]) == {"k9": "7" * 64}
    assert len(selects) == 3
    store.close()
    fresh = Store(url)  # what the query says, read afresh
    assert fresh.recorded_binaries("a", ["k1", "k2", "k3"]) == {"k1": "6" * 64, "k2": None, "k3": None}
    assert fresh.recorded_binaries("b", ["k1", "k9"]) == {"k1": "3" * 64, "k9": "7" * 64}
    fresh.close()
