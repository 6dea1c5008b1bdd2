"""Issue 18's Show scenario live: how fast the operator reclaims borrowed GPUs.

    PYTHONPATH=. .venv/bin/python bench/queues_live.py [--nodes 16] [--policy fifo tiresias]

For each policy: a real control plane of its own (bench/operator_servers.py's
`RealServer`: etcd, kube-apiserver, kube-controller-manager and kube-scheduler in a
temporary folder, as `bench/operator.py --server real` runs it) with `--nodes` DGX-1
nodes registered Ready and their Leases renewed, the Quota tree of
controller/quotas/show.py scaled to the cluster (team-a, team-b, team-c guaranteed
50/30/20 % of its GPUs under one `org`), the test kubelet (tests/operators/kubelet.py:
a SIGTERMed worker checkpoints and exits after `--sigterm-s`, then deletes its pod
with grace 0, as a kubelet does) and the operator in a thread
(tests/operators/harness.py, round interval 0.5 s) under its own ServiceAccount's
token. team-a floods the cluster with one-GPU jobs, one per GPU, and borrows every GPU
over its guarantee; then team-b and team-c submit as many jobs as the cluster has
GPUs, each. Timed, from the first of the others' submissions: the first
PreemptedForReclaim event, and every team at exactly its guarantee (the issue's
"within one round plus the grace period"), also from the last submission. Counted:
reclaim preemptions, and any job of team-b or team-c preempted (should be none).

Prints one line per policy, for docs/benchmarks.md. The machine's load skews the
times: note it (`uptime`) beside the figures. Needs the control plane's binaries
(`make controlplane`).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

from bench.operator_servers import RealServer
from controller.quotas.show import GUARANTEES
from operators import crd
from operators.kube import KubeApi, api_client
from operators.pods.failure_policy import EXIT_CHECKPOINTED
from operators.quotas.resources import QuotaApi
from tests.operators.builders import make_dljob, make_node_body
from tests.operators.harness import phases, running_operator
from tests.operators.kubelet import Kubelet

GPUS_PER_NODE = 8  # DGX-1 (tests/operators/builders.make_node_body)
INTERVAL_S = 0.5
POLL_S = 0.25  # the times below are upper bounds to within this
TIMEOUT_S = 300.0
WEIGHTS = {"team-a": 1.0, "team-b": 2.0, "team-c": 1.0}


def guarantees(gpus: int) -> dict[str, int]:
    """controller/quotas/show.py's 50/30/20 % split of `gpus`, whole GPUs adding up."""
    total = sum(GUARANTEES.values())
    out = {t: gpus * g // total for t, g in GUARANTEES.items()}
    out["team-a"] += gpus - sum(out.values())
    return out


def quota(name: str, **spec: Any) -> dict[str, Any]:
    meta = {"name": name}
    return {"apiVersion": crd.API_VERSION, "kind": crd.QUOTA_KIND, "metadata": meta, "spec": spec}


def job(team: str, k: int) -> dict[str, Any]:
    body = make_dljob(f"{team}-{k:04d}", 1, duration_s=36_000)
    body["spec"]["tenant"] = team
    return body


def running(api: KubeApi) -> Counter[str]:
    return Counter(n[: len("team-a")] for n, p in phases(api).items() if p == "Running")


def wait(what: str, check: Any) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > TIMEOUT_S:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(POLL_S)
    return time.monotonic()


def run(policy: str, nodes: int, sigterm_s: float) -> str:
    gpus = nodes * GPUS_PER_NODE
    want = guarantees(gpus)
    server = RealServer(None)
    try:
        api, quotas = server.api, QuotaApi(server.api)
        server.create_nodes([make_node_body(f"node-{i}", rack=f"r{i // 4}") for i in range(nodes)])
        quotas.create(quota("org", guarantee=gpus))
        for team, g in want.items():
            quotas.create(quota(team, parent="org", guarantee=g, weight=WEIGHTS[team]))
        kubelet = Kubelet(server.client, sigterm_s=sigterm_s, sigterm_exit=EXIT_CHECKPOINTED)
        operator = api_client(str(server.operator_kubeconfig))
        kubelet.start()
        try:
            with running_operator(operator, policy=policy, interval_s=INTERVAL_S):
                for k in range(gpus):
                    api.create_dljob("default", job("team-a", k))
                wait("the flood to run", lambda: running(api)["team-a"] == gpus)
                submitted = time.monotonic()
                for k in range(gpus):
                    for team in ("team-b", "team-c"):
                        api.create_dljob("default", job(team, k))
                last = time.monotonic()
                first = wait("a reclaim", lambda: _reclaims(api) > 0)
                settled = wait("each team at its guarantee", lambda: running(api) == want)
        finally:
            kubelet.stop()
            operator.rest_client.pool_manager.clear()
        events = api.core.list_namespaced_event("default").items
        preempted = Counter(
            (e.involved_object.name[: len("team-a")], e.reason)
            for e in events
            if e.reason.startswith("Preempted")
        )
    finally:
        server.close()
    others = sum(n for (team, _), n in preempted.items() if team != "team-a")
    return (
        f"{policy}: {nodes}x{GPUS_PER_NODE} GPUs, guarantees {want}, sigterm {sigterm_s} s: "
        f"first reclaim {first - submitted:.2f} s, all at guarantee {settled - submitted:.2f} s "
        f"after the others' first submission ({settled - last:.2f} s after their last, "
        f"{last - submitted:.2f} s later); {preempted[('team-a', 'PreemptedForReclaim')]} "
        f"reclaim preemptions of team-a, {others} preemptions of team-b/team-c"
    )


def _reclaims(api: KubeApi) -> int:
    events = api.core.list_namespaced_event("default").items
    return sum(1 for e in events if e.reason == "PreemptedForReclaim")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--policy", nargs="+", default=["fifo", "tiresias"])
    parser.add_argument("--sigterm-s", type=float, default=1.0)
    args = parser.parse_args()
    for policy in args.policy:
        print(run(policy, args.nodes, args.sigterm_s), flush=True)


if __name__ == "__main__":
    main()
