"""An operator that loses its Lease steps down and rejoins the election.

Each operator runs in a thread on an API client of its own, tapped: while the test
freezes it, the client's Lease requests hang (as on an API server that stopped
answering them, or a partition) and every other write it sends is logged with the
time it left. They run on the real control plane and the kubelet double of the
operator tests; a steady workload keeps the leader writing. The last test runs
`gpuflow operator run` itself, its Lease updates failed by the test server
(fault_cluster: a 503 on cue).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from operators.kube import KubeApi, api_client
from operators.operator import Operator, OperatorConfig
from tests.operators.builders import make_dljob
from tests.operators.conftest import GpuCluster
from tests.operators.harness import FAST_LEASE, phases, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster

ROOT = Path(__file__).resolve().parents[2]
# Past FAST_LEASE's lease duration (2 s): long enough for a standby to take over.
FREEZE_S = 3.0
READ_METHODS = ("GET", "HEAD")


class Writes:
    """Every non-Lease write of the tapped clients: (monotonic time sent, operator)."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def add(self, who: str) -> None:
        with self._lock:
            self.sent.append((time.monotonic(), who))

    def by(self, who: str, start: float = 0.0, end: float = float("inf")) -> int:
        with self._lock:
            return sum(1 for t, w in self.sent if w == who and start <= t < end)

    def runs(self) -> list[str]:
        """Who wrote, in order of sending, each run of one operator's writes once."""
        with self._lock:
            order = [w for _, w in sorted(self.sent)]
        return [w for i, w in enumerate(order) if i == 0 or order[i - 1] != w]


class TappedClient:
    """An API client whose Lease requests wait while `frozen` is set and whose other
    writes go to `writes` under `name`."""

    def __init__(self, gpu_cluster: RealCluster, name: str, writes: Writes) -> None:
        self.client = api_client(str(gpu_cluster.kubeconfig))
        self.frozen = threading.Event()
        inner = self.client.rest_client.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if "/leases" in url:
                while self.frozen.is_set():
                    time.sleep(0.01)
            elif method not in READ_METHODS:
                writes.add(name)
            return inner(method, url, *args, **kwargs)

        self.client.rest_client.request = request


@contextmanager
def running(gpu_cluster: RealCluster, name: str, writes: Writes) -> Iterator[tuple[Operator, Any]]:
    """An operator named `name` in a thread on a tapped client; yields it and the tap."""
    tap = TappedClient(gpu_cluster, name, writes)
    config = OperatorConfig(identity=name, lease=FAST_LEASE, interval_s=0.5, watch_timeout_s=5)
    op = Operator(KubeApi(tap.client), config)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(op.run()), daemon=True)
    thread.start()
    try:
        yield op, tap
        assert thread.is_alive(), f"{name} stopped on its own (exit {codes})"
    finally:
        tap.frozen.clear()
        op.stop()
        thread.join(timeout=10)
    assert codes == [0]


def wait_until(what: str, predicate: Any, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def submit(api: KubeApi, first: int, count: int) -> list[str]:
    names = [f"job-{i:03d}" for i in range(first, first + count)]
    for name in names:
        api.create_dljob("default", make_dljob(name, 4, duration_s=0.6))
    return names


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_leader_that_lost_its_lease_stops_writing_then_leads_again(
    gpu_cluster: RealCluster,
) -> None:
    api, writes = gpu_cluster.api, Writes()
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running(gpu_cluster, "a", writes) as (op, tap):
            before = submit(api, 0, 12)  # 2 at a time on 8 GPUs: ~4 s of work
            wait_until("a's first writes", lambda: writes.by("a") > 0)
            tap.frozen.set()
            frozen_at = time.monotonic()
            time.sleep(FREEZE_S)
            # Work was held back: jobs wait that a leader would have started by now.
            held_back = [name for name, phase in phases(api).items() if phase != "Succeeded"]
            thawed_at = time.monotonic()
            tap.frozen.clear()
            wait_until("a to lead again", lambda: op.elector.term == 2 and op.elector.leading())
            after = submit(api, 12, 4)
            wait_phases(api, "Succeeded", before + after, timeout_s=30)
            assert op.elector.losses == 1
        # Not leading from the renew deadline on; nothing may go out once a standby
        # could lead (the lease duration), however late a write queued before it leaves.
        silent_from = frozen_at + FAST_LEASE.lease_duration_s
        assert writes.by("a", silent_from, thawed_at) == 0
        assert held_back
        assert writes.by("a", thawed_at) > 0  # it carried on
    finally:
        kubelet.stop()


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_two_operators_hand_over_twice_and_never_act_at_once(gpu_cluster: RealCluster) -> None:
    api, writes = gpu_cluster.api, Writes()
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running(gpu_cluster, "a", writes) as (a, tap_a):
            wait_until("a to lead", a.elector.leading)
            with running(gpu_cluster, "b", writes) as (b, tap_b):
                names = submit(api, 0, 24)  # ~8 s of work: both hand-overs under load
                wait_until("b to sync", b.caches.synced)
                wait_until("a's writes", lambda: writes.by("a") > 0)
                tap_a.frozen.set()  # a cannot renew: b takes the Lease over
                wait_until("b to lead", b.elector.leading)
                tap_a.frozen.clear()
                wait_until("a to step down", lambda: a.elector.losses == 1)
                wait_until("b's writes", lambda: writes.by("b") > 0)
                tap_b.frozen.set()  # and back: a, a standby now, takes it again
                wait_until("a to lead again", lambda: a.elector.term == 2 and a.elector.leading())
                tap_b.frozen.clear()
                wait_until("b to step down", lambda: b.elector.losses == 1)
                wait_phases(api, "Succeeded", names, timeout_s=40)
                assert not b.elector.leading()
        assert writes.runs() == ["a", "b", "a"], "two operators wrote in turns"
        assert (a.elector.term, b.elector.term) == (2, 1)
        assert set(phases(api).values()) == {"Succeeded"}
    finally:
        kubelet.stop()


def test_gpuflow_operator_run_keeps_running_after_losing_its_lease(
    fault_cluster: GpuCluster, tmp_path: Path
) -> None:
    """The command itself: its Lease updates fail for longer than the renew deadline
    (the test server answers 503), it steps down, leads again and does not exit."""
    log_path = tmp_path / "operator.log"
    cmd = [
        sys.executable, "-m", "gpuflow.operator_cmd", "operator", "run",
        "--kubeconfig", str(fault_cluster.server.kubeconfig), "--interval", "0.5",
        "--lease-duration", "2", "--renew-deadline", "1.5", "--retry-period", "0.25",
        "--metrics-port", "0",
    ]  # fmt: skip
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log)
    try:
        wait_until("leading", lambda: "leading" in log_path.read_text(), timeout_s=60)
        for _ in range(12):  # 12 renewals at 0.25 s: 3 s without one
            fault_cluster.server.fail_next("update", "leases", 503)
        wait_until("term 2", lambda: "term=2" in log_path.read_text(), timeout_s=15)
        assert proc.poll() is None, log_path.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "lost the lease" in text and "term=1" in text
    assert text.index("lost the lease") < text.index("term=2") < text.index("released the lease")
