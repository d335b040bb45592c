"""Red-team round 218: the PostgreSQL store under a DBA's role and database settings.

1. A DBA's client_encoding (ALTER ROLE farm SET client_encoding = 'LATIN1') could not carry a
   kernel's "✓" (nor the U+FFFD a NUL becomes): psycopg's encoder raised UnicodeEncodeError, outside
   the store's errors, so a passing cell was stored infra-error "internal error in the farm", the
   node called unusable, the run exit 70. An SQL_ASCII database (its default client encoding) could
   not be opened at all (TypeError). Sessions now run in UTF-8 whatever the role says, as in UTC.
2. A write that failed for good mid-run (the server turned read-only under the run: a failover, the
   DBA's default_transaction_read_only) stopped the run only once the failing node's other workers
   had each run one more cell, and every other node went on meanwhile. Now the stop comes at once.
3. A read-only server's refusal said only "cannot execute INSERT in a read-only transaction", at
   the start and mid-run, and `farm import`, which it said to run, met the same: now it names
   default_transaction_read_only, how to reset it, and the hot standby case.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool
from test_redteam87 import RUN
from test_store_backends import postgres_admin, postgres_url  # noqa: F401 (fixtures)

from orchestrator.store.database import Store

CHECK = "hôte ✓ \ufffd"  # Latin-1 has the ô, not the check mark nor U+FFFD


def _set_for_farm(url: str, setting: str) -> None:
    """The DBA's ALTER ROLE farm IN DATABASE ... SET: the role's sessions there, from the next one."""
    engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with engine.connect() as db:
        name = db.execute(text("SELECT current_database()")).scalar()
        db.execute(text(f'ALTER ROLE CURRENT_USER IN DATABASE "{name}" SET {setting}'))
    engine.dispose()


@pytest.fixture
def sql_ascii_url(postgres_admin: Engine) -> Iterator[str]:  # noqa: F811
    name = f"farm_t_ascii_{secrets.token_hex(4)}"
    with postgres_admin.connect() as db:
        encoding = "ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"
        db.execute(text(f'CREATE DATABASE "{name}" {encoding}'))
    try:
        yield postgres_admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with postgres_admin.connect() as db:
            db.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.mark.parametrize("where", ["role's LATIN1", "SQL_ASCII database"])
def test_a_dbas_client_encoding_stores_what_utf8_holds(where: str, request: pytest.FixtureRequest) -> None:
    """Before: UnicodeEncodeError ('latin-1' codec can't encode '\\u2713'), a pass stored infra-error and
    exit 70 in `farm verify`; on SQL_ASCII, TypeError at open. Figure: the text stored and read back whole."""
    if where == "SQL_ASCII database":
        url = request.getfixturevalue("sql_ascii_url")
    else:
        url = request.getfixturevalue("postgres_url")
        _set_for_farm(url, "client_encoding = 'LATIN1'")
    store = Store(url)
    try:
        fields = {**RUN, "host": CHECK}
        run_id = store.begin_run(planned=[("k", "v1", "n", "")], config_file="f", token="aa", **fields)
        store.finish_run(run_id, "finished", 0)
        with store.engine.connect() as db:
            assert db.execute(text("SELECT host FROM runs WHERE id = :i"), {"i": run_id}).scalar() == CHECK
    finally:
        store.close()


def _farm_on(root: Path, url: str, variants: int = 1) -> tuple[Path, dict[str, str]]:
    """The toy farm on its local node, its kernel 3 s long, `variants` cells of it, on `url`."""
    from toyfarm import toy_on_t4

    config, env = toy_on_t4(root)
    config.write_text(config.read_text().replace("sqlite:///results.db", url))
    (root / "kernels" / "toy.cpp").write_text(
        '#include <cstdio>\n#include <unistd.h>\nint main() { sleep(3); std::printf("toy: PASS\\n"); return 0; }\n'
    )
    job = root / "jobs" / "toy.yaml"
    plain = job.read_text().split("  plain:\n", 1)[1]
    job.write_text(job.read_text() + "".join(f"  more{i}:\n{plain}" for i in range(variants - 1)))
    return config, env


def test_a_read_only_database_is_refused_at_start_saying_what_to_do(tmp_path: Path, postgres_url: str) -> None:  # noqa: F811
    """Before: exit 5, "cannot execute INSERT in a read-only transaction", nothing said of the setting.
    Figure: ALTER ROLE ... SET default_transaction_read_only = on; exit 5 naming it and its RESET,
    no cell run, nothing stored."""
    from farm_cli import farm

    config, env = _farm_on(tmp_path / "farm", postgres_url)
    Store(postgres_url).close()  # the farm's schema, before the DBA's change
    _set_for_farm(postgres_url, "default_transaction_read_only = on")
    ran = farm("verify", "--all", cwd=config.parent, env=env, timeout=60)
    assert ran.returncode == 5, ran.stdout + ran.stderr
    assert "default_transaction_read_only" in ran.stderr and "RESET" in ran.stderr, ran.stderr
    assert "hot standby" in ran.stderr and "nothing of this run was stored" in ran.stderr, ran.stderr
    assert "pass" not in ran.stdout, ran.stdout  # no cell ran


def test_a_database_turned_read_only_mid_run_stops_the_run_at_once(tmp_path: Path, postgres_url: str) -> None:  # noqa: F811
    """Before: the first cell's result was refused (the server read-only after its sessions were cut,
    as in a failover), yet the node's other worker ran its cell for 3 s more: two passes journaled,
    ~6 s. Figure: three 3-s cells; read-only and the sessions ended 1 s in: exit 5, one pass journaled
    (the next cell's kernel killed as it began), the run aborted, the message naming the setting and `farm import`."""
    from farm_cli import farm

    config, env = _farm_on(tmp_path / "farm", postgres_url, variants=3)
    journals = config.parent / ".farm-journal"

    def dba() -> None:  # once the node is ready (its snapshot journaled): read-only, every session cut
        deadline = time.monotonic() + 30
        ready = lambda: any('"kind":"snapshot"' in j.read_text() for j in journals.glob("*.jsonl"))  # noqa: E731
        while time.monotonic() < deadline and not ready():
            time.sleep(0.05)
        time.sleep(1)
        _set_for_farm(postgres_url, "default_transaction_read_only = on")
        engine = create_engine(postgres_url, poolclass=NullPool)
        with engine.connect() as db:
            others = "datname = current_database() AND pid <> pg_backend_pid()"
            db.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {others}"))
        engine.dispose()

    flip = threading.Thread(target=dba)
    flip.start()
    began = time.monotonic()
    ran = farm("verify", "--all", cwd=config.parent, env=env, timeout=60)
    took = time.monotonic() - began
    flip.join()
    assert ran.returncode == 5, ran.stdout + ran.stderr
    assert "default_transaction_read_only" in ran.stderr and "farm import" in ran.stderr, ran.stderr
    (journal,) = journals.glob("*.jsonl")
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    passes = [r["variant"] for r in records if r["kind"] == "result" and r["outcome"] == "pass"]
    assert len(passes) == 1, passes  # the cell whose write failed; none ran after it
    assert records[-1]["kind"] == "finish" and records[-1]["status"] == "aborted", records[-1]
    assert took < 30, took  # not the whole night's queue
