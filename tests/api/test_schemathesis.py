"""Property-based tests from the OpenAPI document (schemathesis `--checks all`), on
PostgreSQL and on SQLite, as an admin and as a user: no input gets a 5xx, and every
answer keeps the document's word (its status code, content type, headers and body
schema are the ones declared; a 405 lists the path's methods in `Allow`; a request
without its token is refused; data that breaks the schema is refused and data that
keeps it is not).

Every operation gets MAX_EXAMPLES generated requests of each kind: valid ones
(positive) and ones that break the schema (negative), which must be refused with a
declared 4xx. The admin reaches every route; the user (another tenant) meets the 403s
of the admin's routes, which the document declares.
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
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.core.failures import FailureGroup
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi.checks import positive_data_acceptance

from api.app import create_app
from api.settings import Settings
from tests.api.builders import auth

# Fields whose worth no document can state: it depends on what is stored (a trace's
# id, a queue's parent, the cluster's size, an Idempotency-Key used before with another
# body), on a reader's grammar (a trace file's rows, a cluster's name with its size
# bounds) or on another field (min_gpus <= num_gpus <= max_gpus). Data that keeps the
# document may get a 422 naming one of these, and only these; any other 422 to valid
# data is a failure.
KEYED = {"Idempotency-Key"}
STATE_DEPENDENT = {
    # A `deadline` is valid until the moment it passes (a schema-valid time may be past).
    ("POST", "/api/v1/jobs"): {"num_gpus", "min_gpus", "max_gpus", "deadline", *KEYED},
    ("POST", "/api/v1/replays"): {"trace_id", "cluster", *KEYED},
    ("POST", "/api/v1/replays/sweeps"): {"trace_ids", "clusters", *KEYED},
    ("POST", "/api/v1/traces"): {"file"},
    ("POST", "/api/v1/traces/validate"): {"file"},
    ("PUT", "/api/v1/quotas/{name}"): {"parent", "guarantee", "limit", "tenants"},
    # A history window: last_s or from_s, a to_s after the start, at most 2,000 bins.
    **{
        ("GET", f"/api/v1/history/{path}"): {"last_s", "to_s", "step_s"}
        for path in ("cluster", "nodes", "nodes/{name}/gpus", "tenants")
    },
}

# ~40 operations x 12 requests x 2 kinds x 2 roles: about 25 s a database on a 2-core
# machine, bounded by the CI's 2 minutes for all four with room for a loaded one.
MAX_EXAMPLES = 12


def all_checks() -> list[Any]:
    """What `schemathesis run --checks all` runs (the stateful ones, use-after-free
    and resource availability, find nothing in a run of single requests)."""
    load_all_checks()
    return list(CHECKS.get_all())


def refused_for_state(method: str, path: str, response: Any) -> bool:
    """A 422 whose every error names a STATE_DEPENDENT field of the operation."""
    fields = STATE_DEPENDENT.get((method.upper(), path), set())
    if response.status_code != 422 or not fields:
        return False
    detail = response.json()["detail"]
    if isinstance(detail, dict):  # a trace reader's: the file's line and field
        return "file" in fields and "line" in detail
    return all(
        e["loc"][0] in ("body", "header", "query") and e["loc"][1:2] in ([f] for f in fields)
        for e in detail
    )


@pytest.fixture(params=["postgresql", "sqlite"])
def app(request: pytest.FixtureRequest) -> Iterator[FastAPI]:
    base: Settings = request.getfixturevalue(
        f"{'pg' if request.param == 'postgresql' else 'sqlite'}_settings"
    )
    # Schemathesis runs the app's lifespan itself (once, until shut down).
    yield create_app(base)
    shutdown_lifespans()


@pytest.mark.slow
@pytest.mark.parametrize("role", ["admin", "user"])
def test_no_generated_request_fails_a_check(app: FastAPI, role: str) -> None:
    headers = auth(app, "root" if role == "admin" else "ann", "ops", role)
    # The deprecated aliases (/queue, /queues) are the same handlers as /order and /quotas,
    # which run here; tests/api/test_names.py checks that each answers as its new name.
    schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(deprecated=True)
    failures: list[str] = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for result in schema.get_all_operations():
            operation = result.ok()  # type: ignore[union-attr]
            try:
                _exercise(operation, mode, headers, failures)
            except Unsatisfiable:  # negative mode: an operation with no input to get wrong
                assert mode is GenerationMode.NEGATIVE
    assert not failures, "\n".join(sorted(set(failures)))


def _exercise(
    operation: Any, mode: GenerationMode, headers: dict[str, str], out: list[str]
) -> None:
    """MAX_EXAMPLES requests of `mode` to `operation`, every check's failure into `out`."""
    checks = all_checks()
    without_acceptance = [c for c in checks if c is not positive_data_acceptance]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same requests each run: a CI result can be reproduced
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        # The token is the caller's, not a generated header (a negative case's mangled
        # Authorization would be replaced in the call, and judged as if it were sent).
        case.headers = {**(case.headers or {}), **headers}
        response = case.call()
        run = checks
        if refused_for_state(case.method, operation.path, response):
            run = without_acceptance
        try:
            case.validate_response(response, checks=run, headers=headers)
        except FailureGroup as exc:
            for failure in exc.exceptions:
                said = " ".join(str(failure).split())[:300]
                out.append(
                    f"{mode.value} {case.method} {case.formatted_path} -> "
                    f"{response.status_code}: {said} {response.text[:200]}"
                )

    check()
