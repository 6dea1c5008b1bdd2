"""A migrated PostgreSQL database of its own for a test session, and emptying it
between tests (tests/api and tests/dashboard fixtures use these)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy import text

from api.settings import Settings
from api.store.db import make_engine
from api.store.migrations import upgrade
from api.store.models import Base

PG_ADMIN_URL = os.environ.get("GPUFLOW_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1/test")
RUN_ID = uuid.uuid4().hex[:10]


def database_url(db: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{db}"


@contextmanager
def migrated_database(prefix: str) -> Iterator[str]:
    """Create `<prefix>_<run id>`, migrate it with Alembic, yield its URL, drop it."""
    name = f"{prefix}_{RUN_ID}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    engine = make_engine(Settings(database_url=url))
    upgrade(engine)
    engine.dispose()
    try:
        yield url
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def truncate_all(settings: Settings) -> None:
    """Empty every table of the service's database (after a test)."""
    engine = make_engine(settings)
    tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()
