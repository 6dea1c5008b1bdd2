"""The live cluster's history in cluster mode, on the session's real control plane:
the node agent (through the fake NVML) publishes its GPUs' readings on its Node, a
DLJob runs on four of them, and the service's sampler records the GPUs' allocation,
memory, temperature, power and ECC health, and the tenant's GPUs, on the wall clock."""

from __future__ import annotations

import time
from typing import Any

from api.settings import Settings
from operators.agent.main import AgentOptions, run_agent
from tests.api.builders import auth, submit, wait_for
from tests.api.test_cluster_mode import T0, Operatorish, service, settings
from tests.operators.fake_nvml import FakeNvml
from tests.operators.real_cluster import RealCluster

__all__ = ["settings"]

API = "/api/v1"


def test_the_agents_readings_and_a_running_dljob_are_sampled(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    kube_cluster.add_node("node-0")
    nvml = FakeNvml(temperature_c={2: 77}, power_mw={2: 301_000}, ecc_errors={5: 3},
                    no_power=frozenset({7}), mem_used={2: 9 * 1024**3})  # fmt: skip
    nvml.nvmlInit()
    options = AgentOptions(node_name="node-0", once=True, enforce_bandwidth=False)
    assert run_agent(options, nvml=nvml, api=kube_cluster.api) == 0
    with service(settings.model_copy(update={"history_sample_s": 1.0})) as client:
        alice = auth(client, "alice", "vision")
        job = submit(client, alice, num_gpus=4)
        op = Operatorish(kube_cluster, job["dljob_name"])
        op.admitted(T0, attempt=1)  # GPUs 0-3 of node-0
        op.running(T0 + 1)

        def sampled() -> dict[str, Any] | None:
            # The last bin holds only samples taken while the job ran: two in a row.
            r = client.get(f"{API}/history/nodes/node-0/gpus", params={"last_s": 60}, headers=alice)
            if r.status_code == 404:  # no sample of node-0 yet
                return None
            body: dict[str, Any] = r.json()
            return body if body["gpus"] and body["gpus"][0]["allocated"][-1] == 1.0 else None

        gpus = wait_for(sampled, timeout_s=30)
        assert gpus["clock"] == "wall" and abs(gpus["to_s"] - time.time()) < 30
        last = {g["index"]: {k: v[-1] for k, v in g.items() if k != "index"} for g in gpus["gpus"]}
        assert [last[i]["allocated"] for i in range(8)] == [1.0] * 4 + [0.0] * 4
        assert (last[2]["temperature_c"], last[2]["power_w"]) == (77.0, 301.0)
        assert last[2]["mem_used_mib"] == 9 * 1024 and gpus["mem_total_mib"] == 16_160
        assert (last[5]["ecc_errors"], last[5]["healthy"]) == (3.0, 0.0)
        assert (last[7]["power_w"], last[7]["healthy"]) == (None, 1.0)  # no power sensor
        assert last[1]["util"] == 0.1  # the fake's utilisation: 10 % per GPU index
        cluster = client.get(f"{API}/history/cluster", params={"last_s": 60}, headers=alice).json()
        assert 4.0 in cluster["gpus_allocated"] and cluster["gpus_unhealthy"][-1] == 1.0
        tenants = client.get(f"{API}/history/tenants", params={"last_s": 60}, headers=alice)
        assert [(t["tenant"], 4.0 in t["gpus"]) for t in tenants.json()["data"]] == [
            ("vision", True)
        ]
