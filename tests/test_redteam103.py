"""Red-team round 103: trust and operations leftovers.

1. A store URL's password where `user:password@` is not: a libpq conninfo string in a query
   value (`dbname='host=x password=secret'`) or in the database path, `sslpassword`, a
   parameter name percent-encoded (`%70assword`), a URI nested in a value: each was printed.
2. The modes of what the farm writes for its operators (the journal, the --log file) and for
   its readers (the report's pages), whatever the umask.
3. A job that demonstrates a CUDA error on purpose may waive the CUDA-error rule, and only it.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from farm_cli import farm
from nodes import Fleet, standin_job, standin_variant
from test_config import GOOD_JOB, load_error
from test_config import make_farm as job_farm
from test_verdicts import MIN75, rows, run
from toyfarm import toy_farm

from orchestrator.classify import Evidence, classify
from orchestrator.cli import main
from orchestrator.config.farm import load_farm
from orchestrator.errors import StoreError
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.store.engine import _scrub, redact_url
from orchestrator.store.url_secrets import url_secrets

SECRET = "s3cret-rt103"  # fixed: xdist workers must agree on the parameter ids


# 1. a store URL's secrets --------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u@h/db?password={SECRET}",
        f"postgresql://u@h/db?sslpassword={SECRET}",
        f"postgresql://u@h/db?%70assword={SECRET}",  # SQLAlchemy decodes the name: libpq reads `password`
        f"postgresql://u@h/db?SSLPassword={SECRET}&connect_timeout=3",
        f"postgresql://u@h/db?dbname=host%3Dx%20password%3D{SECRET}",
        f"postgresql://u@h/db?dbname=host=x+password={SECRET}",
        f"postgresql://u@h/db?dbname='host=x password={SECRET}'",
        f"postgresql://u@h/db?dbname=host=x%20password='{SECRET}'",
        f"postgresql://u@h/db?dbname=host%3Dx%20sslpassword%3D%27{SECRET}%27",
        f"postgresql://u@h/db?options=x&dbname=postgresql%3A%2F%2Fx%3A{SECRET}%40h2%2Fd",
        f"postgresql://u@h/db?dbname=postgresql://x:{SECRET}@h2/d",
        f"postgresql://u@h/host%3Dx%20password%3D{SECRET}",  # the path is a dbname too
        f"postgresql+psycopg://u:{SECRET}@h/db?password={SECRET}",
    ],
)
def test_a_password_anywhere_in_the_url_is_masked(url: str) -> None:
    shown = redact_url(url)
    assert SECRET not in shown and "***" in shown, shown
    assert SECRET in url_secrets(url), url_secrets(url)
    echoed = f"connection failed: {url} (password={SECRET}, '{SECRET}')"
    assert SECRET not in _scrub(echoed, url)


def test_a_percent_encoded_password_is_masked_as_the_driver_echoes_it() -> None:
    url = "postgresql://u@h/db?password=s3%63ret%2Dxyz&dbname=host%3Dx%20password%3Dp%2540ssword"
    assert {"s3cret-xyz", "p%40ssword"} <= set(url_secrets(url))
    assert "s3cret" not in _scrub("driver said: password s3cret-xyz refused", url)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///results.db?timeout=30",
        "sqlite:////srv/farm/a%20b/results.db",
        "postgresql+psycopg://farm@db.example:5432/farm?connect_timeout=3&application_name=farm",
        "postgresql://farm@h/db?dbname=host%3Dh2%20port%3D5433",
    ],
)
def test_a_url_without_secrets_reads_as_written(url: str) -> None:
    assert redact_url(url) == url and url_secrets(url) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_refusing_server_named_by_a_conninfo_dbname_is_an_error_without_its_password() -> None:
    from orchestrator.store.database import Store

    port = _free_port()
    url = f"postgresql+psycopg://farm@127.0.0.1:{port}/db?dbname=host%3D127.0.0.1%20port%3D{port}%20password%3D{SECRET}"
    with pytest.raises(StoreError) as info:
        Store(url)
    assert SECRET not in str(info.value) and "dbname=***" in str(info.value), str(info.value)


def test_a_failed_verify_s_log_holds_no_conninfo_password(tmp_path: Path) -> None:
    """The --log file's last line is the failed verify's why: the URL in it is masked too."""
    config = toy_farm(tmp_path)
    port = _free_port()
    url = f"postgresql+psycopg://farm@127.0.0.1:{port}/db?dbname=host%3D127.0.0.1%20port%3D{port}%20password%3D{SECRET}"
    log = tmp_path / "verify.log"
    run = farm(
        "verify", "--all", "--no-report", "--config", str(config), "--database", url, "--log", str(log), umask=0o022
    )
    assert run.returncode == 5, run.stdout + run.stderr
    assert SECRET not in run.stdout + run.stderr + log.read_text()
    assert "dbname=***" in log.read_text()


# 2. modes: the journal is the database's copy, the report is published ----------------------
def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_journal_gets_no_more_readers_than_the_database_it_copies(tmp_path: Path) -> None:
    """results.db kept owner-only (0600) had its journal, every record and output of it, 0644."""
    config = toy_farm(tmp_path)
    first = farm("verify", "--all", "--no-report", "--config", str(config), umask=0o022)
    assert first.returncode == 0, first.stdout + first.stderr
    database = tmp_path / "results.db"
    journals = database.with_name("results.db.journal")
    assert {_mode(j) for j in journals.glob("*.jsonl")} == {_mode(database)} == {0o644}  # both as the umask says
    database.chmod(0o600)
    before = set(journals.glob("*.jsonl"))
    second = farm("verify", "--all", "--no-report", "--config", str(config), umask=0o022)
    assert second.returncode == 0, second.stdout + second.stderr
    (new,) = set(journals.glob("*.jsonl")) - before
    assert _mode(new) == 0o600


def test_a_server_database_s_journal_is_its_owner_s_alone() -> None:
    from orchestrator.store.journal import journal_mode

    assert journal_mode("postgresql+psycopg://farm@h/db") == 0o600  # the server's login guards the database


def test_report_pages_rendered_under_umask_077_can_be_served(tmp_path: Path) -> None:
    """The report is published (README: reviewers read reports/): under cron's umask 077 every page
    and folder was the farm user's alone, and the web server serving reports/ answered 403."""
    config = toy_farm(tmp_path)
    run = farm("verify", "--all", "--config", str(config), umask=0o077)
    assert run.returncode == 0, run.stdout + run.stderr
    reports = tmp_path / "reports"
    pages = [p for p in reports.rglob("*") if not p.name.startswith(".")]
    assert any(p.name == "index.html" for p in pages) and any(p.parent.name == "cells" for p in pages)
    assert _mode(reports) == 0o755  # the farm made it
    for page in pages:
        assert _mode(page) == (0o755 if page.is_dir() else 0o644), page
    assert _mode(tmp_path / "results.db") == 0o600  # the database still follows the umask


# 3. a job that demonstrates a CUDA error on purpose -----------------------------------------
ILLEGAL = 'stderr line 1: "CUDA error at demo.cu:12: an illegal memory access was encountered"'


def _evidence(**fields: object) -> Evidence:
    seen = {"build_exit": 0, "inspect_exit": 0, "run_exit": 0, "pass_line": 2, "kernel_started": True}
    return Evidence(**{**seen, "kernel_exit": 0, "cuda_error": ILLEGAL, **fields})


MUST = Expectation(Outcome.PASS, "CC 7.5 satisfies min 7.5")


def _waived() -> Expectation:
    return dataclasses.replace(MUST, cuda_error_waived=True)


def test_the_cuda_error_rule_stays_strict_by_default() -> None:
    assert classify(_evidence(), MUST).outcome is Outcome.FAIL


def test_a_waived_job_passes_after_its_cuda_error_and_says_the_rule_was_waived() -> None:
    verdict = classify(_evidence(), _waived())
    assert verdict.outcome is Outcome.PASS, verdict
    assert "an illegal memory access was encountered" in verdict.reason and "waived" in verdict.reason
    assert "cuda_error_text: expected" in verdict.reason
    clean = classify(_evidence(cuda_error=""), _waived())  # waived even where no error was printed: said too
    assert clean.outcome is Outcome.PASS and "waived" in clean.reason


@pytest.mark.parametrize(
    "fields",
    [
        {"run_exit": 1, "kernel_exit": 1},  # the demonstration's error ended the kernel badly
        {"pass_line": None},  # no pass marker
        {"run_exit": 1, "kernel_exit": 1, "pass_line": None},
    ],
)
def test_a_waived_job_still_fails_on_its_exit_or_a_missing_marker(fields: dict[str, object]) -> None:
    verdict = classify(_evidence(**fields), _waived())
    assert verdict.outcome is Outcome.FAIL, verdict
    assert "waived" not in verdict.reason


@pytest.mark.parametrize("where", ["job", "variant"])
def test_cuda_error_text_loads_per_job_and_per_variant(tmp_path: Path, where: str) -> None:
    from orchestrator.plan import waives_cuda_errors

    job = (
        GOOD_JOB.replace("pass_marker:", "cuda_error_text: expected\npass_marker:")
        if where == "job"
        else GOOD_JOB + "    cuda_error_text: expected\n  v2:\n    build: '{nvcc} -o {binary} {sources}'\n"
        "    cc: {min: '7.5'}\n"
    )
    farm = load_farm(job_farm(tmp_path, job=job))
    spec = farm.jobs["k"].spec
    assert waives_cuda_errors(spec, spec.variants["v1"])
    if where == "variant":
        assert not waives_cuda_errors(spec, spec.variants["v2"])  # the other variant stays strict
    (tmp_path / "plain").mkdir()
    plain = load_farm(job_farm(tmp_path / "plain", job=GOOD_JOB)).jobs["k"].spec
    assert not waives_cuda_errors(plain, plain.variants["v1"])


@pytest.mark.parametrize("value", ["yes", "true", "Expected", "'waived'", "[expected]", "1"])
def test_a_bad_cuda_error_text_names_the_file_the_key_and_what_was_expected(tmp_path: Path, value: str) -> None:
    job = GOOD_JOB.replace("pass_marker:", f"cuda_error_text: {value}\npass_marker:")
    said = str(load_error(job_farm(tmp_path, job=job)))
    assert "k.yaml" in said and "cuda_error_text" in said and "'strict' or 'expected'" in said, said
    variant = GOOD_JOB + f"    cuda_error_text: {value}\n"
    (tmp_path / "variant").mkdir()
    said = str(load_error(job_farm(tmp_path / "variant", job=variant)))
    assert "k.yaml" in said and "variants.v1.cuda_error_text" in said and "'strict' or 'expected'" in said, said


def test_a_waived_variant_passes_on_the_farm_and_its_page_and_json_say_so(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """The whole way: a stand-in kernel prints CUDA's error, then its pass line, and exits 0."""
    prelude = tmp_path / "demo.sh"
    prelude.write_text('echo "CUDA error at demo.cu:12: an illegal memory access was encountered" >&2\n')
    variants = {
        "demo": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude, cuda_error_text="expected"),
        "strict": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude),
        "demo_bad_exit": standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude, cuda_error_text="expected"),
    }
    root = tmp_path / "farm"
    config = make_farm(root, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [standin_job("standin", variants)])
    _, summary = run(config)
    found = {
        variant: (r["outcome"], r["reason"] or "")
        for (variant, _), r in rows(root / "results.db", summary.run_id).items()
    }
    assert found["demo"][0] == "pass" and "waived" in found["demo"][1], found
    assert found["strict"][0] == "fail" and "waived" not in found["strict"][1], found
    assert found["demo_bad_exit"][0] == "fail", found
    exported = CliRunner().invoke(main, ["report", "--format", "json", "--config", str(config)])
    assert exported.exit_code != 2, exported.output
    [demo] = [r for r in json.loads(exported.output)["cells"] if r["variant"] == "demo"]
    assert "waived" in demo["reason"]
    rendered = CliRunner().invoke(main, ["report", "--config", str(config)])
    assert rendered.exit_code in (0, 1), rendered.output
    pages = [p.read_text() for p in (root / "reports" / "cells").rglob("*.html")]
    assert any("cuda_error_text: expected" in page and "waived" in page for page in pages)
