"""Pollux live on a model without a published profile (issue 25, item 2): the job keeps
its batch until it reports gradient statistics and throughput, then gets batch sizes
from its own (policies.pollux.goodput), carried out in place on the control plane."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller.model import Action
from operators.kube import KubeApi
from tests.operators.builders import dljob_status, make_dljob
from tests.operators.harness import running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for

BATCH = 64


def report(api: KubeApi, name: str, grad_var: float) -> None:
    """Write the job's `status.train` as the API does from gpuflow.train's reports."""
    obj = api.get_dljob("default", name)
    obj["status"]["train"] = {
        "step": 200,
        "reportedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "batchSize": BATCH,
        "gpus": 4,
        "samplesPerSecond": 2000.0,
        "throughput": [{"gpus": 4, "batchSize": BATCH, "samplesPerSecond": 2000.0}],
        "gradSqr": 1.0,
        "gradVar": grad_var,
    }
    api.replace_dljob_status(obj)


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_an_unprofiled_job_gets_batch_sizes_once_it_reports(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(
            gpu_cluster.client, policy="pollux", policy_options=(("pollux", "interval_s", 1.0),)
        ) as op:
            body = make_dljob("mlp", 4, duration_s=600.0)
            body["spec"].update({"model": "mlp", "batchSize": BATCH})
            api.create_dljob("default", body)
            wait_phases(api, "Running", ["mlp"])
            tally = op.controller.tally
            # Without statistics: its own batch, never changed (rounds at its interval).
            wait_for("a round after the start", lambda: op.controller.last_plan is not None, 10)
            assert dljob_status(api, "mlp").get("batchSize", BATCH) == BATCH
            assert tally.of("default/mlp").get(Action.REBATCH, 0) == 0
            # A large gradient noise keeps large batches efficient: Pollux raises it.
            report(api, "mlp", grad_var=1e4)
            raised = wait_for(
                "a larger batch from the job's own statistics",
                lambda: (
                    (dljob_status(api, "mlp").get("batchSize") or BATCH) > BATCH
                    and dljob_status(api, "mlp")["batchSize"]
                ),
                20,
            )
            assert BATCH < raised <= 16 * BATCH
            # The controller counts a plan's actions once the backend has applied them,
            # after their status writes: the new batch may show before its count.
            wait_for(
                "the rebatch counted", lambda: tally.of("default/mlp").get(Action.REBATCH, 0), 5
            )
            assert tally.of("default/mlp").get(Action.START, 0) == 1  # in place, no restart
            assert dljob_status(api, "mlp")["phase"] == "Running"
    finally:
        kubelet.stop()
