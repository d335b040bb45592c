"""Red-team round 104: this session's new code (since 360c695).

1. `cuda_error_text: expected` waived the CUDA-error rule, and said so only in the verdict's reason:
   the matrix cell, the JSON's fields and JUnit showed a waived pass as any other, and a job that
   dropped the waiver kept its waived green standing (no `job changed since`).
2. The run's cache of recorded binaries learnt a result's binary before its transaction committed:
   a result the database refused still vouched for a cached build.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import marshal
import threading
import types
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from nodes import Fleet, query, standin_job, standin_variant
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from test_records import full_result
from test_verdicts import MIN75, rows, run

from orchestrator.cli import main
from orchestrator.cuda_waiver import FLAG, NOTE, was_waived
from orchestrator.errors import StoreError
from orchestrator.report.ledger import CapabilityState, KernelLedger
from orchestrator.store.database import Store
from orchestrator.store.journal import read as journal_read

# ---------------------------------------------------------------- 1: the waiver, where reviewers certify


def _export(config: Path, fmt: str) -> str:
    out = CliRunner().invoke(main, ["report", "--format", fmt, "--config", str(config)])
    assert out.exit_code != 2, out.output
    return out.output


def test_a_waived_pass_is_told_apart_in_the_matrix_json_junit_and_show(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    prelude = tmp_path / "demo.sh"
    prelude.write_text('echo "CUDA error at demo.cu:12: an illegal memory access was encountered" >&2\n')
    variants = {
        "demo": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude, cuda_error_text="expected"),
        "plain": standin_variant("PASS", MIN75, "MIN_CC=75"),
    }
    root = tmp_path / "farm"
    config = make_farm(root, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [standin_job("standin", variants)])
    _, summary = run(config)
    found = {variant: r for (variant, _), r in rows(root / "results.db", summary.run_id).items()}
    assert found["demo"]["outcome"] == "pass" and found["plain"]["outcome"] == "pass"
    assert NOTE in found["demo"]["expected_reason"] and NOTE not in found["plain"]["expected_reason"]
    assert (found["demo"]["cuda_waived"], found["plain"]["cuda_waived"]) == (1, 0)  # the typed flag (0015)

    cells = {c["variant"]: c for c in json.loads(_export(config, "json"))["cells"]}
    assert cells["demo"]["cuda_error_waived"] is True and cells["plain"]["cuda_error_waived"] is False

    cases = {c.get("classname"): c for c in ET.fromstring(_export(config, "junit")).iter("testcase")}
    # each case also names its card (gpu, cc, real_gpu: review 108); the waiver is the plain one's only difference
    props = {
        v: {p.get("name"): p.get("value") for p in cases[f"standin.{v}"].iter("property")} for v in ("demo", "plain")
    }
    assert props["demo"].pop("cuda_error_waived") == FLAG and "cuda_error_waived" not in props["plain"]
    assert props["demo"] == props["plain"], props

    shown = CliRunner().invoke(main, ["show", str(found["demo"]["id"]), "--config", str(config)])
    assert NOTE in shown.output, shown.output

    assert CliRunner().invoke(main, ["report", "--config", str(config)]).exit_code in (0, 1)
    index = (root / "reports" / "index.html").read_text()
    demo_cell = index[index.index("standin</a> : demo") :].split("</tr>")[0]
    plain_cell = index[index.index("standin</a> : plain") :].split("</tr>")[0]
    assert FLAG in demo_cell and FLAG not in plain_cell

    # the job drops the waiver: its waived green is no longer current, in the matrix or the JSON
    job = root / "jobs" / "standin.yaml"
    job.write_text(job.read_text().replace("cuda_error_text: expected", "cuda_error_text: strict"))
    assert CliRunner().invoke(main, ["report", "--config", str(config)]).exit_code in (0, 1)
    index = (root / "reports" / "index.html").read_text()
    demo_cell = index[index.index("standin</a> : demo") :].split("</tr>")[0]
    assert "job changed since" in demo_cell and "CUDA-error rule waived" in demo_cell, demo_cell
    cells = {c["variant"]: c for c in json.loads(_export(config, "json"))["cells"]}
    assert "no longer declares CUDA's error text expected" in (cells["demo"]["job_changed_since"] or "")
    assert cells["plain"]["job_changed_since"] is None


def test_kernel_output_cannot_make_a_pass_read_as_waived_or_strict() -> None:
    """Only the expectation (the job file's) says it: the reason holds the kernel's words."""
    said = f"pass marker line 3: {NOTE}"
    spoof = SimpleNamespace(outcome="pass", reason=said, expected_reason="CC 7.5 satisfies >=7.5", cuda_waived=False)
    assert not was_waived(spoof)
    # the stored flag (0015), never the words: a fail is no waived pass even were it set
    failed = SimpleNamespace(
        outcome="fail", reason="", expected_reason=f"CC 7.5 satisfies >=7.5; {NOTE}", cuda_waived=True
    )
    assert not was_waived(failed)  # a fail is no pass, waived or not


def test_a_waived_certificate_is_voided_once_its_job_asks_the_rule_again(tmp_path: Path) -> None:
    from test_config import GOOD_JOB
    from test_config import make_farm as job_farm

    from orchestrator.config.farm import load_farm
    from orchestrator.report.rejudged import flag_ledgers

    farm = load_farm(job_farm(tmp_path, job=GOOD_JOB))
    cert = SimpleNamespace(variant="v1", cuda_error_waived=True, code_path=None, cc="7.5", stages={})
    entry = _ledger(farm, cert)
    flag_ledgers(farm, [entry])
    assert "cuda-error-unwaived" in entry.voided.get("7.5", []), entry.flags
    kept = _ledger(farm, SimpleNamespace(**{**vars(cert), "cuda_error_waived": False}))
    flag_ledgers(farm, [kept])
    assert "cuda-error-unwaived" not in kept.voided.get("7.5", [])


def _ledger(farm: object, cert: object) -> KernelLedger:
    return KernelLedger("k", "kernels/k.cu", "0" * 64, [], {"7.5": CapabilityState("7.5", [cert])})  # type: ignore[list-item]


# ---------------------------------------------------------------- 2: the run's recorded binaries


def test_a_result_whose_commit_failed_vouches_for_no_cached_build(tmp_path: Path) -> None:
    """The cache must say what the database says: a refused result's binary is none of it."""
    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    fields = {"token": "t", "trigger": "t", "farm_version": "t", "host": "h", "config_file": "f", "selection": "s"}
    run_id = store.begin_run(planned=[("gemm", "v", "a", "")], **fields)
    assert store.recorded_binaries("a", ["k1"]) == {"k1": None}

    def refuse(_conn: object) -> None:
        raise OperationalError("COMMIT", {}, Exception("database or disk is full"))

    event.listen(store.engine, "commit", refuse)
    result = dataclasses.replace(full_result(run_id, None), node="a", build_key="k1", binary_sha256="6" * 64)
    with pytest.raises(StoreError):
        store.add_result(result)
    event.remove(store.engine, "commit", refuse)
    assert store.recorded_binaries("a", ["k1"]) == {"k1": None}
    store.add_result(result)  # committed: learnt
    assert store.recorded_binaries("a", ["k1"]) == {"k1": "6" * 64}
    store.close()


# ---------------------------------------------------------------- 5: a node's records, from each node's thread


def test_two_nodes_journaling_at_once_get_their_own_snapshot_refs(tmp_path: Path) -> None:
    """Each node's thread adds its records; both took ref len(refs)+1 before either registered its
    snapshot, so the journal held two snapshots of ref 1 and its import gave one node's results the
    other node's card, driver and nvcc."""
    from test_node_records import snapshot_of

    from orchestrator.store.journal import Journal
    from orchestrator.store.records import AttemptRecord

    store = Store(f"sqlite:///{tmp_path / 'results.db'}")
    store.journal = Journal(tmp_path / "j", "tok")
    fields = {"token": "tok", "trigger": "t", "farm_version": "t", "host": "h", "config_file": "f", "selection": "s"}
    run_id = store.begin_run(**fields)
    both = threading.Barrier(2, timeout=2)
    write_many = store.journal.write_many

    def meeting(records: list) -> None:  # both nodes' threads journal at the same moment, where they can
        if any(kind == "snapshot" for kind, _ in records):
            with contextlib.suppress(threading.BrokenBarrierError):
                both.wait()
        write_many(records)

    store.journal.write_many = meeting  # type: ignore[method-assign]
    ids: dict[str, int] = {}

    def node(name: str) -> None:
        attempt = AttemptRecord(run_id=run_id, node=name, attempt=1, status="ok")
        ids[name] = store.add_node_records(attempt, snapshot_of(run_id, name))

    threads = [threading.Thread(target=node, args=(name,)) for name in ("a100", "h100")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in ("a100", "h100"):
        store.add_result(dataclasses.replace(full_result(run_id, ids[name]), node=name))
    store.finish_run(run_id, "finished", 0)
    store.close()
    refs = [f["ref"] for kind, f in journal_read(tmp_path / "j" / "tok.jsonl") if kind == "snapshot"]
    assert len(set(refs)) == 2, refs
    fresh = Store(f"sqlite:///{tmp_path / 'imported.db'}")
    fresh.import_journal(tmp_path / "j" / "tok.jsonl")
    fresh.close()
    joined = "select r.node, s.node as snap from results r join node_snapshots s on s.id = r.snapshot_id"
    pairs = query(tmp_path / "imported.db", joined)
    assert sorted((p["node"], p["snap"]) for p in pairs) == [("a100", "a100"), ("h100", "h100")]


# ---------------------------------------------------------------- 3: the runner's kept code


@pytest.mark.parametrize("planted", [marshal.dumps(None), marshal.dumps("x = 42"), marshal.dumps((1, 2))])
def test_kept_runner_that_unmarshals_to_no_code_is_compiled_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: bytes
) -> None:
    """marshal.loads succeeding was the whole check: a file holding a string or None was sent to
    every node as the runner (each node failed on it, every run, until the file was removed)."""
    from orchestrator.run import runner_code

    monkeypatch.setattr(runner_code, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(runner_code, "_COMPILED", {})
    source = b"x = 41 + 1\n"
    path = runner_code.cache_file(source)
    assert path is not None
    path.write_bytes(planted)
    code = runner_code.compiled(source)
    assert isinstance(marshal.loads(code), types.CodeType)
    assert path.read_bytes() == code  # compiled over


def test_a_waived_certificate_says_so_on_the_kernel_page() -> None:
    from datetime import UTC, datetime

    from orchestrator.report.ledger import Certificate
    from orchestrator.report.site import _env  # type: ignore[attr-defined]

    cert = Certificate(1, 1, datetime.now(UTC), "0" * 64, "v1", "n", "T4", "7.5", "d", "12.4", "nvcc", None, "PASS")
    template = _env().get_template("kernel.html.j2")
    for waived in (True, False):
        state = CapabilityState("7.5", [dataclasses.replace(cert, cuda_error_waived=waived)], passes=1)
        entry = KernelLedger("k", "k.cu", "0" * 64, [], {"7.5": state})
        page = template.render(run=SimpleNamespace(id=1), entry=entry, grid="", runs=[], trends=[])
        assert (FLAG in page) is waived


# ---------------------------------------------------------------- 4: a store URL's password in the config's errors


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///nofolder/r.db?password=SECRET4",  # a query the farm does not read
        "sqlite+pysqlcipher://:SECRET5@/nofolder/r.db",  # a SQLCipher passphrase, its folder missing
        "sqlite+pysqlcipher://:SECRET7@/r.db?timeout=abc",  # a bad timeout
        "sqlite://:SECRET8@/:memory:",  # in memory
    ],
)
def test_the_database_checks_never_print_its_password(url: str) -> None:
    """The checks before a run (--database, farm.yaml's `database`) said the URL as written: the
    password went to the terminal, `--log` and the cron mail."""
    from orchestrator.config.database_url import check_database_folder
    from orchestrator.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        check_database_folder(url, "farm.yaml")
    assert "SECRET" not in str(raised.value) and "***" in str(raised.value), raised.value
