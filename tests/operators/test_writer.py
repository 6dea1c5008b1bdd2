"""The operator's writer against the test API server: write ordering per job."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from operators.dljobs.resources import QUEUED, Reasoned, status_mutator
from operators.writer import Writer
from tests.operators.builders import dljob_status, make_dljob
from tests.operators.real_cluster import RealCluster


def test_two_status_writes_to_one_job_land_in_the_order_made(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    obj = api.create_dljob("default", make_dljob("j"))
    upserted: list[dict[str, Any]] = []
    caches = SimpleNamespace(dljobs=SimpleNamespace(upsert=upserted.append))
    # The first write's request is slow: were the two sent side by side, the second
    # would land first and the first, after its 409, would be re-applied on top.
    real = api.replace_dljob_status
    first_started = threading.Event()

    def replace(new: dict[str, Any]) -> dict[str, Any]:
        if new["status"]["reason"] == "First":
            first_started.set()
            time.sleep(0.3)
        stored: dict[str, Any] = real(new)
        return stored

    api.replace_dljob_status = replace  # type: ignore[method-assign]
    writer = Writer(api, caches, lambda: True)  # type: ignore[arg-type]
    try:
        writer.status(obj, status_mutator(QUEUED, Reasoned("First", "one"), now_s=1.0))
        writer.status(obj, status_mutator(QUEUED, Reasoned("Second", "two"), now_s=2.0))
        writer.flush()
    finally:
        writer.close()
    assert first_started.is_set()
    status = dljob_status(api, "j")
    assert (status["reason"], status["message"]) == ("Second", "two")
    assert [o["status"]["reason"] for o in upserted] == ["First", "Second"]
