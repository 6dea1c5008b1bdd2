"""Traces read in child processes (api.replays.trace_check): the summary and the refusals come
back as from a read in the API's own process, the reading happens in a child, and a
child killed while reading is reported and replaced."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.replays.trace_check import TraceChecker, TraceCheckFailed
from controller.traces import TraceError, load_trace
from tests.api.builders import auth, upload_trace, wait_for


@pytest.fixture()
def checker() -> Iterator[TraceChecker]:
    checker = TraceChecker(1)
    yield checker
    checker.stop()


def test_the_summary_is_the_traces_and_is_read_in_a_child(
    checker: TraceChecker, trace_file: Path
) -> None:
    before = {p.pid for p in multiprocessing.active_children()}
    summary = checker.check(trace_file, None, 1_000_000)
    trace = load_trace(trace_file)
    assert (summary.name, summary.fmt, summary.jobs) == (trace.name, trace.fmt, len(trace.jobs))
    assert summary.gpus_max == max(j.num_gpus for j in trace.jobs)
    assert summary.span_s == trace.jobs[-1].submit_s - trace.jobs[0].submit_s
    readers = {p.pid for p in multiprocessing.active_children()} - before
    assert len(readers) == 1 and os.getpid() not in readers


def test_a_refusal_comes_back_with_its_line_and_field(
    checker: TraceChecker, trace_file: Path, tmp_path: Path
) -> None:
    lines = trace_file.read_text().splitlines()
    header, row = lines[0].split(","), lines[3].split(",")
    row[header.index("num_gpus")] = "many"
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([*lines[:3], ",".join(row), *lines[4:]]) + "\n")
    with pytest.raises(TraceError) as raised:
        checker.check(bad, None, 1_000_000)
    with pytest.raises(TraceError) as direct:
        load_trace(bad)
    assert (raised.value.line, raised.value.field) == (direct.value.line, direct.value.field)
    assert (raised.value.line, raised.value.field) == (4, "num_gpus")
    with pytest.raises(TraceError) as over:
        checker.check(trace_file, None, 25)
    assert over.value.line == 27  # the 26th job, after the header


def test_a_reader_killed_mid_file_is_reported_and_replaced(
    checker: TraceChecker, trace_file: Path, tmp_path: Path
) -> None:
    # A FIFO with no writer: the child blocks opening it, in the middle of a check.
    fifo = tmp_path / "stuck.csv"
    os.mkfifo(fifo)
    failed: list[BaseException] = []

    def check_stuck() -> None:
        try:
            checker.check(fifo, None, 1_000_000)
        except BaseException as exc:
            failed.append(exc)

    waiter = threading.Thread(target=check_stuck)
    waiter.start()
    reader = wait_for(lambda: multiprocessing.active_children(), timeout_s=60)[0]
    reader.kill()
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert len(failed) == 1 and isinstance(failed[0], TraceCheckFailed)
    assert checker.check(trace_file, None, 1_000_000).jobs == 40  # a new reader


def test_uploads_answer_as_before_through_the_readers(client: TestClient, trace_file: Path) -> None:
    alice = auth(client, "alice", "vision")
    assert upload_trace(client, alice, trace_file)["jobs"] == 40
    r = client.post(
        "/api/v1/traces/validate", files={"file": ("t.csv", b"not,a\ntrace\n")}, headers=alice
    )
    assert r.status_code == 422 and r.json()["detail"]["error"].startswith("t.csv")
