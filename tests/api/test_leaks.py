"""Information leaks (issue 15): other tenants' job ids, database text, hosts, /metrics.

A user sees other tenants' jobs on a node as a count and in a wait reason as "another
tenant's job"; a database or broker failure reaches a client as its kind only; the
Prometheus endpoint takes an admin's token or the scrape token.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

from api.app import create_app
from api.http import errors
from api.jobs.redaction import OTHER_JOB
from api.replays.run import _shown_error
from api.settings import Settings
from api.store.models import TraceFile
from tests.api.builders import auth, submit, wait_for
from tests.api.conftest import DEAD_PG_URL, DEAD_REDIS_URL

JOBS = "/api/v1/jobs"
LONG = {"duration_s": 1e7}


def _status(client: TestClient, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = client.get(f"{JOBS}/{job_id}", headers=headers).json()
    return body


def test_nodes_name_only_the_callers_jobs(client: TestClient, admin: dict[str, str]) -> None:
    alice, bob = auth(client, "alice", "vision"), auth(client, "bob", "nlp")
    a = submit(client, alice, num_gpus=4, **LONG)["id"]
    b = submit(client, bob, num_gpus=4, **LONG)["id"]
    wait_for(lambda: all(_status(client, admin, j)["status"] == "Running" for j in (a, b)))

    def seen(headers: dict[str, str]) -> tuple[set[str], int]:
        nodes = client.get("/api/v1/nodes", headers=headers).json()["data"]
        return {j for n in nodes for j in n["jobs"]}, sum(n["other_jobs"] for n in nodes)

    assert seen(bob) == ({b}, 1)
    assert seen(alice) == ({a}, 1)
    assert seen(admin) == ({a, b}, 0)


def test_a_wait_reason_does_not_name_another_tenants_job(
    client: TestClient, admin: dict[str, str]
) -> None:
    alice, bob = auth(client, "alice", "vision"), auth(client, "bob", "nlp")
    first = submit(client, alice, num_gpus=8, **LONG)["id"]
    wait_for(lambda: _status(client, alice, first)["status"] == "Running")
    head = submit(client, alice, num_gpus=8, **LONG)["id"]  # waits at the head of the queue
    behind = submit(client, bob, num_gpus=2, **LONG)["id"]
    wait_for(lambda: head in (_status(client, admin, behind)["reason_message"] or ""))
    for shown in (
        _status(client, bob, behind)["reason_message"],
        client.get(f"{JOBS}/{behind}/reason", headers=bob).json()["message"],
        client.get(JOBS, headers=bob).json()["data"][0]["reason_message"],
    ):
        assert head not in shown and f"waiting behind {OTHER_JOB}" in shown


def _raised(cls: type[Exception]) -> Exception:
    secret = "INSERT INTO users (name) VALUES (%(name)s) at /var/lib/postgresql 10.0.0.7:5432"
    return cls(secret, {"name": "hunter2"}, Exception(secret))


@pytest.mark.parametrize(
    ("handler", "cls", "code"),
    [
        (errors.database_down, OperationalError, 503),
        (errors.bad_value, DataError, 422),
        (errors.conflict, IntegrityError, 409),
    ],
)
def test_database_errors_carry_no_sql_parameters_or_hosts(
    handler: Any, cls: type[Exception], code: int
) -> None:
    async def run() -> Any:
        return await handler(None, _raised(cls))

    response = anyio.run(run)
    assert response.status_code == code
    for secret in (b"INSERT", b"hunter2", b"/var/lib", b"10.0.0.7", b"5432"):
        assert secret not in response.body


def test_a_failed_replay_shows_no_database_text_or_server_path() -> None:
    trace = TraceFile(id=3, name="philly", path="/srv/data/traces/upload-x/philly.csv")
    assert "INSERT" not in _shown_error(_raised(OperationalError), trace)
    shown = _shown_error(ValueError(f"{trace.path}:7: field 'gpus': not a number"), trace)
    assert "/srv" not in shown and shown.startswith("trace 3 (philly):7:")


def test_503s_do_not_name_the_database_or_broker_host(pg_settings: Settings) -> None:
    update = {"database_url": DEAD_PG_URL, "broker_url": DEAD_REDIS_URL, "live": False}
    with TestClient(create_app(pg_settings.model_copy(update=update))) as client:
        r = client.get(JOBS, headers={"Authorization": "Bearer gf_anything"})
        assert r.status_code == 503 and r.json() == {"detail": "database unavailable"}
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {"database": "unavailable", "broker": "unavailable"}


def test_metrics_need_an_admin_or_the_scrape_token(pg_settings: Settings) -> None:
    settings = pg_settings.model_copy(
        update={"metrics_token": SecretStr("scrape-secret"), "live": False}
    )
    with TestClient(create_app(settings)) as client:
        alice, root = auth(client, "alice", "vision"), auth(client, "root", "ops", "admin")
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.get("/metrics", headers=alice).status_code == 403
        assert client.get("/metrics", headers=root).status_code == 200
        scrape = {"Authorization": "Bearer scrape-secret"}
        r = client.get("/metrics", headers=scrape)
        assert r.status_code == 200 and "gpuflow_http_requests_total" in r.text
