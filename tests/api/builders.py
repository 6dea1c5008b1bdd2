"""Builders for service tests: users with tokens, jobs, uploads, polling."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError

from api.http.security import issue_token
from api.settings import Settings
from api.store.db import make_engine
from api.store.migrations import upgrade
from api.store.models import User
from tests import waiting


def auth(
    client: TestClient | FastAPI, name: str, tenant: str, role: str = "user"
) -> dict[str, str]:
    """A user straight in the database; returns its Authorization header."""
    app = client if isinstance(client, FastAPI) else client.app
    sessions = app.state.sessions  # type: ignore[attr-defined]
    with sessions() as session:
        user = User(name=name, tenant=tenant, role=role)
        session.add(user)
        session.flush()
        _, secret = issue_token(session, user, "test")
        session.commit()
    return {"Authorization": f"Bearer {secret}"}


def job_spec(**overrides: Any) -> dict[str, Any]:
    return {"name": "train", "num_gpus": 2, "model": "resnet50", "duration_s": 100.0, **overrides}


def submit(client: TestClient, headers: dict[str, str], **overrides: Any) -> dict[str, Any]:
    r = client.post("/api/v1/jobs", json=job_spec(**overrides), headers=headers)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def upload_trace(client: TestClient, headers: dict[str, str], path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        r = client.post("/api/v1/traces", files={"file": (path.name, f)}, headers=headers)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def wait_for(check: Callable[[], Any], timeout_s: float = 60.0, every_s: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy; fail after `timeout_s`."""
    return waiting.wait_for("a condition", check, timeout_s, every_s)


@contextmanager
def statements_failing(engine: Engine, prefix: str, containing: str = "") -> Iterator[None]:
    """While inside, each statement on `engine` that starts with `prefix` (and whose
    parameters show `containing`) fails as a lost connection would."""

    def fail(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(prefix) and containing in str(args):
            raise OperationalError(statement, None, Exception("connection lost"))

    event.listen(engine, "before_cursor_execute", fail)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", fail)


def migrated_sqlite(data_dir: Path, **overrides: Any) -> Settings:
    """Local-mode settings on a fresh, migrated SQLite database in `data_dir`: a 2x4
    cluster, 100 times the wall clock, a round whenever the clock moves, unless
    `overrides` say otherwise."""
    values: dict[str, Any] = {
        "cluster": "2x4",
        "time_scale": 100.0,
        "round_interval_s": 0.0,
        "sync_interval_s": 0.05,
    }
    settings = Settings(data_dir=data_dir, **{**values, **overrides})
    engine = make_engine(settings)
    upgrade(engine)
    engine.dispose()
    return settings
