"""Migration 0006: idempotency keys gain their route (`scope`); the keys stored before
it were all POST /jobs's, and a downgrade keeps only those. On PostgreSQL and SQLite."""

from __future__ import annotations

from sqlalchemy import Engine, text

from api.store.migrations import downgrade, upgrade
from tests.api.test_migrations import empty_engine

__all__ = ["empty_engine"]

KEYS = "SELECT key, scope, job_id FROM idempotency_keys ORDER BY key"


def test_keys_stored_before_0006_are_jobs_keys_and_a_downgrade_keeps_only_those(
    empty_engine: Engine,
) -> None:
    upgrade(empty_engine, "0005")
    with empty_engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (id, name, tenant, role, created_at) "
                "VALUES (1, 'alice', 'vision', 'user', CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO idempotency_keys (user_id, key, fingerprint, job_id, response, "
                "created_at) VALUES (1, 'k-job', 'f', 'a1', '{}', CURRENT_TIMESTAMP)"
            )
        )
    upgrade(empty_engine)
    with empty_engine.begin() as conn:
        assert [tuple(r) for r in conn.execute(text(KEYS))] == [("k-job", "jobs", "a1")]
        conn.execute(
            text(
                "INSERT INTO idempotency_keys (user_id, key, scope, fingerprint, response, "
                "created_at) VALUES (1, 'k-replay', 'replays', 'f', '{}', CURRENT_TIMESTAMP)"
            )
        )
    downgrade(empty_engine, "0005")
    with empty_engine.begin() as conn:
        rows = conn.execute(text("SELECT key, job_id FROM idempotency_keys")).all()
        assert [tuple(r) for r in rows] == [("k-job", "a1")]
