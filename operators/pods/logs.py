"""A DLJob's worker pods and their logs, read through the Kubernetes API.

The API server answers GET pods/{name}/log by asking the node's kubelet (on a real
cluster, and in the sandbox, whose kubelets serve their pods' log files:
gpuflow/sandbox/kubelet/server.py), so this reads the same bytes `kubectl logs` shows.
Called by the API service in cluster mode (api/cluster_mode/worker_logs.py, for GET
/api/v1/jobs/{id}/logs); the API reaches Kubernetes only through this package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from operators import crd
from operators.dljobs.template import worker_index
from operators.kube import ApiException, KubeApi, Obj, error_message
from operators.pods import pod_attempt, pod_phase


@dataclass(frozen=True)
class WorkerPod:
    """One worker of a DLJob's latest attempt."""

    namespace: str
    name: str
    container: str  # the worker container (operators/dljobs/template.py `worker_index`)
    rank: int
    attempt: int
    node: str  # "" until bound
    phase: str


def worker_pods(api: KubeApi, namespace: str, dljob: str) -> list[WorkerPod]:
    """The pods of the DLJob's latest attempt, by rank (none before it first starts,
    or once a restart has deleted them and the next attempt has not begun)."""
    resp = api.core.list_namespaced_pod(
        namespace, label_selector=f"{crd.LABEL_JOB}={dljob}", _preload_content=False
    )
    pods: list[Obj] = json.loads(resp.data).get("items") or []
    if not pods:
        return []
    latest = max(pod_attempt(p) for p in pods)
    workers = [_worker(p) for p in pods if pod_attempt(p) == latest]
    return sorted(workers, key=lambda w: (w.rank, w.name))


def read_log(api: KubeApi, pod: WorkerPod, tail_lines: int, limit_bytes: int) -> str:
    """The worker container's last `tail_lines` lines, at most `limit_bytes` bytes,
    decoded as UTF-8 (bytes that are not shown as U+FFFD). Raises the API's error (a
    400 while the container waits to start, naming why)."""
    resp = api.core.read_namespaced_pod_log(
        pod.name,
        pod.namespace,
        container=pod.container,
        tail_lines=tail_lines,
        limit_bytes=limit_bytes,
        _preload_content=False,
    )
    data: bytes = resp.data
    return data.decode("utf-8", errors="replace")


def refusal(exc: BaseException) -> str:
    """What the API server (or the kubelet behind it, whose errors are plain text)
    said when it refused a log: one line."""
    if isinstance(exc, ApiException) and exc.body:
        body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else exc.body
        if not body.lstrip().startswith("{"):
            return (body.strip().splitlines() or [""])[0]
    return error_message(exc)


def _worker(pod: Obj) -> WorkerPod:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    containers: list[Obj] = spec.get("containers") or [{}]
    rank = (meta.get("annotations") or {}).get(crd.ANN_RANK, "0")
    return WorkerPod(
        namespace=str(meta["namespace"]),
        name=str(meta["name"]),
        container=str(containers[worker_index(containers)].get("name", "")),
        rank=int(rank) if str(rank).isdigit() else 0,
        attempt=pod_attempt(pod),
        node=str(spec.get("nodeName") or ""),
        phase=pod_phase(pod),
    )
