"""Alembic: empty -> head -> base on PostgreSQL and SQLite; models and migrations agree."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from api.settings import Settings
from api.store.db import make_engine
from api.store.migrations import downgrade, upgrade
from api.store.models import Base
from tests.postgres import PG_ADMIN_URL, database_url


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = make_engine(Settings(data_dir=tmp_path))
        yield engine
        engine.dispose()
        return
    name = f"gpuflow_mig_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    engine = make_engine(Settings(database_url=database_url(name)))
    yield engine
    engine.dispose()
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_upgrade_to_head_matches_the_models_and_downgrade_empties(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    with empty_engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    assert set(Base.metadata.tables) <= set(inspect(empty_engine).get_table_names())
    downgrade(empty_engine)
    assert inspect(empty_engine).get_table_names() == ["alembic_version"]
    upgrade(empty_engine)  # and back up again
