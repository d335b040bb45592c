"""Red-team round 103: trust and operations leftovers.

1. A store URL's password where `user:password@` is not: a libpq conninfo string in a query
   value (`dbname='host=x password=secret'`) or in the database path, `sslpassword`, a
   parameter name percent-encoded (`%70assword`), a URI nested in a value: each was printed.
2. The modes of what the farm writes for its operators (the journal, the --log file) and for
   its readers (the report's pages), whatever the umask.
3. A job that demonstrates a CUDA error on purpose may waive the CUDA-error rule, and only it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from toyfarm import toy_farm

from orchestrator.errors import StoreError
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
    run = _farm("verify", "--all", "--no-report", "--config", str(config), "--database", url, "--log", str(log))
    assert run.returncode == 5, run.stdout + run.stderr
    assert SECRET not in run.stdout + run.stderr + log.read_text()
    assert "dbname=***" in log.read_text()


# 2. modes: the journal is the database's copy, the report is published ----------------------
def _farm(*args: str, umask: int = 0o022) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=lambda: os.umask(umask),  # cron's or a login's umask: the test's subject
    )


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_journal_gets_no_more_readers_than_the_database_it_copies(tmp_path: Path) -> None:
    """results.db kept owner-only (0600) had its journal, every record and output of it, 0644."""
    config = toy_farm(tmp_path)
    first = _farm("verify", "--all", "--no-report", "--config", str(config))
    assert first.returncode == 0, first.stdout + first.stderr
    database = tmp_path / "results.db"
    journals = database.with_name("results.db.journal")
    assert {_mode(j) for j in journals.glob("*.jsonl")} == {_mode(database)} == {0o644}  # both as the umask says
    database.chmod(0o600)
    before = set(journals.glob("*.jsonl"))
    second = _farm("verify", "--all", "--no-report", "--config", str(config))
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
    run = _farm("verify", "--all", "--config", str(config), umask=0o077)
    assert run.returncode == 0, run.stdout + run.stderr
    reports = tmp_path / "reports"
    pages = [p for p in reports.rglob("*") if not p.name.startswith(".")]
    assert any(p.name == "index.html" for p in pages) and any(p.parent.name == "cells" for p in pages)
    assert _mode(reports) == 0o755  # the farm made it
    for page in pages:
        assert _mode(page) == (0o755 if page.is_dir() else 0o644), page
    assert _mode(tmp_path / "results.db") == 0o600  # the database still follows the umask
