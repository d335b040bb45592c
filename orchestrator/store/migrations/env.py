"""Alembic's environment for the farm's results store.

The farm runs migrations itself when it opens a database (store/engine.py), handing
its open connection in through config.attributes["connection"]; a developer
can also run `alembic -c orchestrator/store/migrations/alembic.ini ...` with
FARM_DATABASE set.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from orchestrator.store.tables import Base

target_metadata = Base.metadata
config = context.config


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(os.environ.get("FARM_DATABASE", "sqlite:///results.db"))
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run()
