"""Alembic environment: runs migrations on a connection handed in by api.store.migrations
(config.attributes["connection"]) or on the database the settings name."""

from __future__ import annotations

from logging.config import fileConfig

from sqlalchemy import Connection

from alembic import context
from api.settings import Settings
from api.store.db import make_engine
from api.store.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        # A migration may rewrite a large table: the API's statement limit (api.store.db) is
        # lifted for its transaction; the lock limit stays, so it never queues the API.
        connection.exec_driver_sql("SET LOCAL statement_timeout = 0")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(Settings())
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run online")
run_migrations_online()
