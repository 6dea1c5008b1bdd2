"""Trace uploads: validated on the way in; a bad one is a 422 naming line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.routes import traces as traces_route
from tests.api.builders import auth, upload_trace

TRACES = "/api/v1/traces"


def test_a_valid_trace_is_stored_and_listed(client: TestClient, trace_file: Path) -> None:
    alice = auth(client, "alice", "vision")
    trace = upload_trace(client, alice, trace_file)
    assert trace["jobs"] == 40 and trace["fmt"] == "gpuflow"
    assert client.get(TRACES, headers=alice).json()["data"][0]["id"] == trace["id"]
    assert client.get(f"{TRACES}/{trace['id']}", headers=alice).json()["name"] == "small"


def test_an_invalid_trace_is_a_422_with_the_line(
    client: TestClient, trace_file: Path, tmp_path: Path
) -> None:
    alice = auth(client, "alice", "vision")
    lines = trace_file.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[3].split(",")
    row[header.index("num_gpus")] = "many"
    lines[3] = ",".join(row)
    content = "\n".join(lines) + "\n"
    for path in (TRACES, f"{TRACES}/validate"):
        r = client.post(path, files={"file": ("bad.csv", content)}, headers=alice)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail["line"] == 4 and detail["field"] == "num_gpus"
        # Named by the upload's name; the server's paths stay on the server.
        assert detail["error"].startswith("bad.csv:4: field 'num_gpus': ")
    assert client.get(TRACES, headers=alice).json()["count"] == 0


def test_validate_reports_without_storing(client: TestClient, trace_file: Path) -> None:
    alice = auth(client, "alice", "vision")
    with trace_file.open("rb") as f:
        r = client.post(f"{TRACES}/validate", files={"file": ("t.csv", f)}, headers=alice)
    assert r.status_code == 200 and r.json()["jobs"] == 40
    assert client.get(TRACES, headers=alice).json()["count"] == 0
    r = client.post(f"{TRACES}/validate", files={"file": ("t.csv", b"")}, headers=alice)
    assert r.status_code == 422


def test_a_trace_over_the_job_limit_is_refused_at_the_first_job_over(
    client: TestClient, trace_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The 40-job trace against a limit of 25: refused at the 26th job (line 27, after
    # the header), where the loader stops reading, and nothing is stored.
    monkeypatch.setattr(traces_route, "MAX_TRACE_JOBS", 25)
    alice = auth(client, "alice", "vision")
    for path in (TRACES, f"{TRACES}/validate"):
        with trace_file.open("rb") as f:
            r = client.post(path, files={"file": ("big.csv", f)}, headers=alice)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail["line"] == 27 and detail["msg"] == "more than 25 jobs (the limit)"
    assert client.get(TRACES, headers=alice).json()["count"] == 0
