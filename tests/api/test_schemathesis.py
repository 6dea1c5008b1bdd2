"""Property-based tests from the OpenAPI document (schemathesis): no input gets a 5xx.

Every operation gets MAX_EXAMPLES generated requests, as an admin (who can reach
every route), against the app on PostgreSQL, the pickiest of our databases.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.python.asgi import shutdown_lifespans

from api.app import create_app
from api.settings import Settings
from tests.api.builders import auth

MAX_EXAMPLES = 10  # ~30 operations x 10 requests: about 20 s on a 2-core machine


@pytest.fixture()
def app(pg_settings: Settings) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    # Schemathesis runs the app's lifespan itself (once, until shut down).
    application = create_app(pg_settings)
    yield application, auth(application, "root", "ops", "admin")
    shutdown_lifespans()


def test_no_generated_request_gets_a_5xx(app: tuple[FastAPI, dict[str, str]]) -> None:
    application, admin = app
    schema = schemathesis.openapi.from_asgi("/openapi.json", application)
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]

        @given(case=operation.as_strategy(), data=st.data())
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any, data: st.DataObject) -> None:
            response = case.call(headers=admin)
            if response.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path}: {response.status_code} "
                    f"{response.text[:200]}"
                )

        check()
    assert failures == []
