"""Cluster mode's what-if state from the Nodes: cordons and drains carried over
(api.whatif.cluster.live_state, pure: no server)."""

from __future__ import annotations

import time

import pytest

from api.whatif.cluster import live_state
from operators import crd
from operators.dljobs.resources import LABEL_JOB_ID
from operators.kube.times import format_time, micro_time
from tests.operators.builders import make_dljob, make_node_body


def test_cordoned_and_draining_nodes_reach_the_state() -> None:
    ready, cordoned, draining = (make_node_body(f"node-{i}") for i in range(3))
    cordoned["spec"] = {"unschedulable": True}
    draining["spec"] = {"unschedulable": True}
    draining["metadata"]["annotations"][crd.ANN_NODE_DRAIN] = "root"
    state = live_state([], [ready, cordoned, draining], 100.0, "fifo").state
    assert state.cordoned_nodes == frozenset({1, 2})
    assert state.draining_nodes == frozenset({2})
    assert state.down_nodes == frozenset()


def _running(name: str, started_s: float, train: dict[str, object] | None) -> dict[str, object]:
    """A DLJob running on node-0's first GPU for 1,000 s of expected work since
    `started_s`, with `train` as its status.train (the API's summary of its reports)."""
    obj = make_dljob(name, 1)
    obj["metadata"] |= {
        "uid": f"uid-{name}",
        "creationTimestamp": format_time(started_s - 10),
        "labels": {LABEL_JOB_ID: name.encode().hex().ljust(32, "0")},
    }
    obj["spec"]["expectedDurationSeconds"] = 1000
    status: dict[str, object] = {
        "phase": "Running",
        "startTime": format_time(started_s),
        "allocation": {"shares": [{"node": "node-0", "gpu": 0, "fraction": 1.0}]},
    }
    if train is not None:
        status["train"] = train
    obj["status"] = status
    return obj


def test_a_running_jobs_progress_is_its_reported_steps_at_its_measured_rate() -> None:
    now = float(int(time.time()))
    started = now - 100
    # 320 samples/s at batch 32: 10 steps/s, 10,000 steps in its 1,000 s; step 3,000
    # is 30 % done (its run time alone says 10 %).
    fresh = {"reportedAt": micro_time(now - 5), "step": 3000, "batchSize": 32,
             "gpus": 1, "samplesPerSecond": 320.0}  # fmt: skip
    stale = fresh | {"reportedAt": micro_time(now - 600)}
    jobs = [_running("fresh", started, fresh), _running("stale", started, stale),
            _running("silent", started, None)]  # fmt: skip
    observed = live_state(jobs, [make_node_body("node-0")], now, "fifo")
    done = {bytes.fromhex(j.spec.job_id.rstrip("0")).decode(): j.done_fraction
            for j in observed.state.jobs}  # fmt: skip
    assert observed.clock == "wall"
    assert done == pytest.approx({"fresh": 0.3, "stale": 0.1, "silent": 0.1})
    assert any("1 running job(s) are as far along as their reported steps" in a
               for a in observed.approximations)  # fmt: skip
