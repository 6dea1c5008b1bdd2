"""What the live operator does while the API server refuses a job's pods: requests and
DLJob writes over a window (operators/writer.py's back-off and Invalid phase).

    PYTHONPATH=. .venv/bin/python bench/live_refusals.py [--window-s 10] [--cases CASES]

Each case is a sandbox of its own (gpuflow/sandbox: the real kube-apiserver, one node
of one GPU, the operator as the chart's ServiceAccount) and one DLJob of one GPU that
the API server refuses to start:

`CASES` (comma-separated, all by default):

- `forbidden`: the operator's ClusterRole without `create` on pods (403);
- `malformed`: a worker container port of 99999, which the DLJob's schema lets by and
  the Pod's does not (422);
- `webhook`: a validating webhook on the job's pods that nobody serves (500).

Once the first refusal is counted, for `--window-s` seconds: the pod creates refused
(the operator's `gpuflow_operator_api_errors_total`), the DLJob's writes (MODIFIED
events of a watch on it) and its phase and reason at the end. One JSON line a case.
Run on two trees (PYTHONPATH) to compare them side by side.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes  # type: ignore[import-untyped]

from gpuflow.sandbox.cluster import Sandbox, SandboxConfig
from gpuflow.sandbox.operator_identity import chart_rules, create_operator_identity
from operators import crd

CASES = ("forbidden", "malformed", "webhook")
NAME = "refused"
WEBHOOK = "gpuflow-bench-unanswered"


def dljob(port: int | None) -> dict[str, Any]:
    worker: dict[str, Any] = {"name": "worker", "image": "busybox", "command": ["sleep", "1"]}
    if port is not None:
        worker["ports"] = [{"containerPort": port}]
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "metadata": {"name": NAME, "namespace": "default"},
        "spec": {"gpus": 1, "template": {"spec": {"containers": [worker]}}},
    }


def refuse_pod_creates(sb: Sandbox, directory: Path) -> None:
    rules = copy.deepcopy(chart_rules())
    pods = next(r for r in rules if r["resources"] == ["pods"])
    pods["verbs"].remove("create")
    create_operator_identity(sb.api, directory / "refused.kubeconfig", rules)


def unanswered_webhook(client: Any) -> None:
    hook = {
        "name": "unanswered.gpuflow.bench",
        "clientConfig": {"url": "https://127.0.0.1:9/validate"},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            }
        ],
        "objectSelector": {"matchLabels": {crd.LABEL_JOB: NAME}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 1,
    }
    kubernetes.client.AdmissionregistrationV1Api(client).create_validating_webhook_configuration(
        {"metadata": {"name": WEBHOOK}, "webhooks": [hook]}
    )


def refused_creates(sb: Sandbox) -> float:
    assert sb.operator is not None
    total = 0.0
    for metric in sb.operator.metrics.registry.collect():
        for sample in metric.samples:
            labels = sample.labels
            if (
                sample.name == "gpuflow_operator_api_errors_total"
                and labels.get("verb") == "create"
                and labels.get("resource") == "pods"
            ):
                total += sample.value
    return total


def count_writes(sb: Sandbox, window_s: float, out: list[int]) -> None:
    """MODIFIED events of the DLJob for `window_s` seconds, into out[0]."""
    custom = kubernetes.client.CustomObjectsApi(sb.api.client)
    stream = kubernetes.watch.Watch()
    rv = sb.api.get_dljob("default", NAME)["metadata"]["resourceVersion"]
    for event in stream.stream(
        custom.list_namespaced_custom_object,
        crd.GROUP,
        crd.VERSION,
        "default",
        crd.PLURAL,
        field_selector=f"metadata.name={NAME}",
        resource_version=rv,
        timeout_seconds=int(window_s),
    ):
        if event["type"] == "MODIFIED":
            out[0] += 1
    stream.stop()


def run(case: str, window_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with Sandbox(SandboxConfig(nodes=1, gpus_per_node=1, directory=directory / "sb")) as sb:
            if case == "forbidden":
                refuse_pod_creates(sb, directory)
            elif case == "webhook":
                unanswered_webhook(sb.api.client)
            sb.api.create_dljob("default", dljob(99999 if case == "malformed" else None))
            deadline = time.monotonic() + 60
            while refused_creates(sb) == 0:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{case}: no refused create within 60 s")
                time.sleep(0.05)
            before = refused_creates(sb)
            writes = [0]
            watcher = threading.Thread(target=count_writes, args=(sb, window_s, writes))
            watcher.start()
            watcher.join()
            status = sb.api.get_dljob("default", NAME).get("status") or {}
            return {
                "case": case,
                "window_s": window_s,
                "creates_refused": refused_creates(sb) - before,
                "dljob_writes": writes[0],
                "phase": status.get("phase"),
                "reason": status.get("reason"),
                "attempt": status.get("attempt"),
            }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--window-s", type=float, default=10.0)
    p.add_argument("--cases", default=",".join(CASES))
    args = p.parse_args()
    for case in args.cases.split(","):
        if case not in CASES:
            sys.exit(f"--cases: unknown case {case!r} (one of {', '.join(CASES)})")
        print(json.dumps(run(case, args.window_s)), flush=True)


if __name__ == "__main__":
    main()
