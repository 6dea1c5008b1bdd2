"""The cluster view in depth, cluster mode: each GPU's shares from the DLJobs'
status.allocation, utilisation from the node agent's gpu-status annotation,
fragmentation from the waiting DLJobs, topology from the Nodes' GPU annotations."""

from __future__ import annotations

import json

from api.settings import Settings
from operators import crd
from tests.api.builders import auth, submit, wait_for
from tests.api.test_cluster_mode import T0, Operatorish, kubectl_dljob, service, settings
from tests.operators.builders import node_gpus
from tests.operators.real_cluster import RealCluster

__all__ = ["settings"]

API = "/api/v1"


def test_gpus_utilisation_fragmentation_and_topology_from_kubernetes(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    # The agent's reading of GPU 0 (utilPct by UUID) on node-0.
    status = {"gpus": [{"uuid": node_gpus("node-0").gpus[0].uuid, "utilPct": 87}]}
    kube_cluster.add_node(
        "node-0", rack="r0", annotations={crd.ANN_NODE_GPU_STATUS: json.dumps(status)}
    )
    kube_cluster.add_node("node-1", rack="r1")
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        bob = auth(client, "bob", "speech")
        wait_for(lambda: client.get(f"{API}/cluster", headers=alice).json()["gpus"] == 16)
        job = submit(client, alice, num_gpus=4)
        op = Operatorish(kube_cluster, job["dljob_name"])
        op.admitted(T0, attempt=1)  # GPUs 0-3 of node-0
        op.running(T0 + 1)
        kubectl_dljob(kube_cluster, "big", "speech", gpus=12)  # no status: it waits
        summary = wait_for(
            lambda: (
                (s := client.get(f"{API}/cluster", headers=alice).json())["running"] == 1
                and s["waiting"] == 1
                and s
            )
        )
        # node-0 has 4 free, node-1 8: a 12-GPU gang wants whole nodes, so node-0's 4
        # are fragmented and node-1's are not.
        assert (summary["gpus_free"], summary["fragmentation"]) == (12, 4)
        assert summary["link_loads"] is None

        nodes = {n["name"]: n for n in client.get(f"{API}/nodes", headers=alice).json()["data"]}
        gpus = nodes["node-0"]["gpu_list"]
        share = {"job": job["id"], "fraction": 1.0, "name": job["name"], "tenant": "vision"}
        assert [g["shares"] for g in gpus[:4]] == [[share]] * 4
        assert [g["shares"] for g in gpus[4:]] == [[]] * 4
        assert [g["util"] for g in gpus] == [0.87] + [None] * 7  # others not reported
        assert [g["util"] for g in nodes["node-1"]["gpu_list"]] == [None] * 8
        theirs = client.get(f"{API}/nodes", headers=bob).json()["data"][0]["gpu_list"][0]
        assert theirs["shares"] == [{"job": None, "fraction": 1.0, "name": None, "tenant": None}]

        topology = client.get(f"{API}/cluster/topology", headers=alice).json()
        assert [k["nodes"] for k in topology["node_types"]] == [["node-0", "node-1"]]
        links = topology["node_types"][0]["links"]
        assert len(links) == 8 and links[0][0] == "X" and links[0][1].startswith("NV")
        assert [(r["name"], r["nodes"]) for r in topology["racks"]] == [
            ("r0", ["node-0"]),
            ("r1", ["node-1"]),
        ]
