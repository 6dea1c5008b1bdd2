"""Kubernetes' timestamps: metav1.Time (RFC 3339 to the second) and MicroTime (to the
microsecond, as Leases and Events carry it), to and from Unix seconds.

Read and written wherever the operator, the API's follower and the sandbox's kubelet meet a
timestamp of the Kubernetes API: DLJob statuses, pod states, Leases, Node taints.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def format_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
