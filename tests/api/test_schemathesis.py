"""Property-based tests from the OpenAPI document (schemathesis), on PostgreSQL and on
SQLite: no input gets a 5xx, and every answer keeps the document's word (its status
code, content type and body schema are the ones declared).

Every operation gets MAX_EXAMPLES generated requests of each kind, as an admin (who can
reach every route): valid ones (positive) and ones that break the schema (negative),
which must be refused with a declared 4xx.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.app import create_app
from api.settings import Settings
from tests.api.builders import auth

# ~40 operations x 30 requests x 2 kinds: about 30 s a database on a 2-core machine,
# bounded by the CI's 2 minutes with room for a loaded one.
MAX_EXAMPLES = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(params=["postgresql", "sqlite"])
def app(request: pytest.FixtureRequest) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    base: Settings = request.getfixturevalue(
        f"{'pg' if request.param == 'postgresql' else 'sqlite'}_settings"
    )
    # Schemathesis runs the app's lifespan itself (once, until shut down).
    application = create_app(base)
    yield application, auth(application, "root", "ops", "admin")
    shutdown_lifespans()


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_request_gets_a_5xx_or_an_undeclared_answer(
    app: tuple[FastAPI, dict[str, str]], mode: GenerationMode
) -> None:
    application, admin = app
    schema = schemathesis.openapi.from_asgi("/openapi.json", application)
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            response = case.call(headers=admin)
            try:
                case.validate_response(response, checks=CHECKS, headers=admin)
            except FailureGroup as exc:
                for failure in exc.exceptions:
                    failures.append(
                        f"{case.method} {case.formatted_path} -> {response.status_code}: "
                        f"{' '.join(str(failure).split())[:300]}"
                    )

        try:
            check()
        except Unsatisfiable:  # negative mode: an operation with no input to get wrong
            assert mode is GenerationMode.NEGATIVE
    assert sorted(set(failures)) == []
