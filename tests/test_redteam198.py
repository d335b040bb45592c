"""Red-team round 198: the PostgreSQL store under a DBA's settings, a second farm host, and a
database URL whose password holds URL characters.

1. A password with a raw `@` (`farm:hunter2@corpSecret99@db/farm`): SQLAlchemy reads the password
   to the first `@` and the host as the rest, the masking took the userinfo to the last `@`, so the
   driver's "failed to resolve host 'corpSecret99@db'" printed the password's tail in the clear
   (stderr, --log, the cron mail). Now refused at load (exit 3), the URL masked, saying %40.
2. `farm verify`'s run lock said only "cannot take the run lock of URL: OperationalError" for a
   wrong password or a server that refuses it: nothing said why. Now the driver's first line,
   secrets masked, as every other database error says.
3. The DBA's idle_session_timeout (ALTER ROLE/DATABASE ... SET) ended the run lock's session,
   idle while a long cell ran: a second farm host's start took the lock, closed the first host's
   live run and could reap its kernels on shared nodes. The lock's session now opts out of it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool
from test_redteam87 import RUN
from test_store_backends import postgres_admin, postgres_url  # noqa: F401 (fixtures)

from orchestrator.errors import LockError
from orchestrator.store import lock as lock_mod
from orchestrator.store.database import Store
from orchestrator.store.lock import DatabaseLock

SECRET_TAIL = "corpSecret99"


@pytest.mark.parametrize("origin", ["farm.yaml", "FARM_DATABASE"])
@pytest.mark.parametrize("command", [("verify", "--all"), ("show", "1"), ("report", "--format", "json")])
def test_a_password_with_a_raw_at_is_refused_and_never_printed(
    tmp_path: Path, origin: str, command: tuple[str, ...]
) -> None:
    """Before: exit 5, "failed to resolve host 'corpSecret99@127.0.0.1'": the password's tail in
    the clear. Figure: farm.yaml's `database` or FARM_DATABASE with password hunter2@corpSecret99
    unencoded: exit 3 naming %40, the password nowhere in stdout or stderr."""
    from farm_cli import farm
    from toyfarm import toy_on_t4

    config, env = toy_on_t4(tmp_path / "farm")
    url = f"postgresql+psycopg://farm:hunter2@{SECRET_TAIL}@127.0.0.1:5432/farm_test"
    if origin == "farm.yaml":
        config.write_text(config.read_text().replace("sqlite:///results.db", url))
    else:
        env = {**env, "FARM_DATABASE": url}
    ran = farm(*command, cwd=config.parent, env=env)
    said = ran.stdout + ran.stderr
    assert SECRET_TAIL not in said and "hunter2" not in said, said
    assert ran.returncode == 3, said
    assert "%40" in ran.stderr and (origin in ran.stderr), ran.stderr


def test_the_run_lock_says_why_the_server_refused_it(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
) -> None:
    """Before: "cannot take the run lock of URL: OperationalError" and no more, for a wrong
    password. Figure: FARM_DATABASE with a wrong password holding %, / and @ (encoded): exit 5
    naming "password authentication failed", the password in neither form."""
    from farm_cli import farm
    from toyfarm import toy_on_t4

    config, env = toy_on_t4(tmp_path / "farm")
    wrong = "wr%40ng%2Fpa%25ss"  # wr@ng/pa%ss
    url = make_url(postgres_url).render_as_string(hide_password=False).replace("farm:farm@", f"farm:{wrong}@")
    ran = farm("verify", "--all", cwd=config.parent, env={**env, "FARM_DATABASE": url})
    said = ran.stdout + ran.stderr
    assert ran.returncode == 5, said
    assert "password authentication failed" in ran.stderr, ran.stderr
    assert wrong not in said and "wr@ng/pa%ss" not in said, said


@pytest.fixture
def idle_sessions_ended(postgres_admin: Engine) -> Iterator[str]:  # noqa: F811
    """A database whose sessions the server ends after 1 s idle: the DBA's idle_session_timeout."""
    name = f"farm_t_idle_{secrets.token_hex(4)}"
    with postgres_admin.connect() as db:
        db.execute(text(f'CREATE DATABASE "{name}"'))
        db.execute(text(f"ALTER DATABASE \"{name}\" SET idle_session_timeout = '1s'"))
    url = postgres_admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with postgres_admin.connect() as db:
            db.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_an_idle_session_timeout_hands_no_live_runs_lock_to_another_host(idle_sessions_ended: str) -> None:
    """Before: host B's start took the lock 2.5 s into host A's cell (the server had ended A's idle
    lock session at 1 s), free to mark A's live run aborted. Figure: idle_session_timeout 1 s on the
    database, A's run begun and silent 2.5 s; B's lock (wait 0) is refused, and A's end is stored."""
    url = idle_sessions_ended
    held = DatabaseLock(url).__enter__()
    store = Store(url)
    try:
        run_id = store.begin_run(planned=[("k", "v1", "n", "")], host="host-a", config_file="f", token="aa", **RUN)
        time.sleep(2.5)  # a long kernel on host A: no write, the lock's session idle
        saved = dict(lock_mod._HELD)
        lock_mod._HELD.clear()  # host B is another process on another host
        try:
            with pytest.raises(LockError, match="another farm run holds the advisory lock"):
                DatabaseLock(url, wait=0).__enter__()
        finally:
            lock_mod._HELD.update(saved)
        store.finish_run(run_id, "finished", 0)  # A's own write after the silence: its lock still its own
        engine = create_engine(url, poolclass=NullPool)
        with engine.connect() as db:
            assert db.execute(text("SELECT status FROM runs WHERE id = :i"), {"i": run_id}).scalar() == "finished"
        engine.dispose()
    finally:
        store.close()
        held.__exit__(None, None, None)


def test_a_sqlite_path_may_hold_at_signs() -> None:
    """A guard of the fix above: only a server URL's userinfo is read so; a file path is a path."""
    from orchestrator.config.database_url import raw_at_problem

    assert raw_at_problem("sqlite:///data/a@b/c@d.db", "farm.yaml") is None
    assert raw_at_problem("postgresql+psycopg://farm:p%40ss@db/farm?application_name=a@b", "x") is None
    assert raw_at_problem("postgresql+psycopg://farm:p@ss@db/farm", "x") is not None
