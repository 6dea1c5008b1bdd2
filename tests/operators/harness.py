"""Run an operator in a thread against a test server, and wait for DLJob states."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from operators import crd
from operators.kube import KubeApi
from operators.kube.leader import LeaseConfig
from operators.operator import Operator, OperatorConfig

FAST_LEASE = LeaseConfig(lease_duration_s=2.0, renew_deadline_s=1.5, retry_s=0.25)
# Gavel's rounds are 360 s: a job that arrives between rounds waits for the next one.
# The tests compress them, as they compress Gandiva's quantum and Pollux's interval.
GAVEL_FAST = {"round_s": 1.0}


def compressed(policy: str) -> tuple[tuple[str, str, Any], ...]:
    """The --policy-opt triples that compress `policy`'s own periods for a test."""
    if not policy.startswith("gavel-"):
        return ()
    return tuple((policy, k, v) for k, v in GAVEL_FAST.items())


@contextmanager
def running_operator(client: Any, **options: Any) -> Iterator[Operator]:
    if "policy_options" not in options:
        options["policy_options"] = compressed(options.get("policy", ""))
    config = OperatorConfig(
        identity=options.pop("identity", "test-operator"),
        lease=FAST_LEASE,
        interval_s=options.pop("interval_s", 0.5),
        watch_timeout_s=5,
        **options,
    )
    op = Operator(KubeApi(client), config)
    thread = threading.Thread(target=op.run, daemon=True)
    thread.start()
    try:
        yield op
    finally:
        op.stop()
        thread.join(timeout=10)


def phases(api: KubeApi, namespace: str = "default") -> dict[str, str]:
    items, _ = api.list_dljobs(namespace)
    return {o["metadata"]["name"]: (o.get("status") or {}).get("phase", "") for o in items}


def wait_phases(
    api: KubeApi, want: str, names: list[str] | None = None, timeout_s: float = 60.0
) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = phases(api)
        keys = names if names is not None else list(got)
        if keys and all(got.get(k) == want for k in keys):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not all {want} after {timeout_s} s: {got}; {_why(api, got, want)}"
            )
        time.sleep(0.05)


def _why(api: KubeApi, got: dict[str, str], want: str) -> str:
    """Each job not yet in `want`: its status's reason and message (for the failure)."""
    items, _ = api.list_dljobs("default")
    status = {o["metadata"]["name"]: o.get("status") or {} for o in items}
    jobs = "; ".join(
        f"{name}: {status[name].get('reason')!r} {status[name].get('message')!r}"
        for name, phase in got.items()
        if phase != want and name in status
    )
    pods = api.core.list_namespaced_pod("default").items
    held = ", ".join(
        f"{p.metadata.name} {p.status.phase}{' deleting' if p.metadata.deletion_timestamp else ''}"
        for p in pods
    )
    return f"{jobs}; pods: {held}"


def job_pods(api: KubeApi, name: str) -> list[dict[str, Any]]:
    resp = api.core.list_namespaced_pod(
        "default", label_selector=f"{crd.LABEL_JOB}={name}", _preload_content=False
    )
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items
