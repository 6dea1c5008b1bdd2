"""The example "DDP over two pods" (examples/train/dljob-ddp.yaml) as it is shipped, in
the sandbox on two nodes of one GPU each: its two pods run on two nodes, each a rank of
a gloo gang of two over the nodes' network (the sandbox kubelet's GLOO_SOCKET_IFNAME),
and the job Succeeds with both ranks logging their steps, which the API server serves
from the nodes' kubelets as the log files hold them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuflow.sandbox.cluster import Sandbox, SandboxConfig
from gpuflow.sandbox.jobs import load_jobs, run_jobs
from operators import crd

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train" / "dljob-ddp.yaml"
STEPS = 400
STEP_LOG = re.compile(r"step (\d+) loss ([0-9.]+) batch (\d+)")


def test_the_ddp_example_trains_as_two_pods_on_two_nodes(tmp_path: Path) -> None:
    (job,) = load_jobs([str(EXAMPLE)])
    name = job["metadata"]["name"]
    # Its 4000 steps take minutes on a loaded CI machine; 400 show the same, with a
    # report (and so a log line on each rank) every 0.2 s: 400 steps can take under
    # the default 5 s on a quiet machine, leaving one line, the last.
    (worker,) = job["spec"]["template"]["spec"]["containers"]
    worker["command"] = [f"--steps={STEPS}" if a.startswith("--steps=") else a
                         for a in worker["command"]] + ["--report-interval-s=0.2"]  # fmt: skip
    config = SandboxConfig(nodes=2, gpus_per_node=1, directory=tmp_path, start_operator=False)
    with Sandbox(config) as sb:
        (final,), done = run_jobs(sb, [job], timeout_s=300)
        pods = sb.api.core.list_namespaced_pod(
            "default", label_selector=f"{crd.LABEL_JOB}={name}"
        ).items
        # As `kubectl logs` reads them: the API server asks each node's kubelet.
        served = {
            p.metadata.name: sb.api.core.read_namespaced_pod_log(
                p.metadata.name, "default", _preload_content=False
            ).data.decode(errors="replace")
            for p in pods
        }
        isolated = sb.network is not None and sb.network.isolated
    status = final.get("status") or {}
    assert done and status.get("phase") == "Succeeded", status
    assert status.get("restarts", 0) == 0
    # One pod per node, ranks 0 and 1 of a world of 2, each holding its node's one GPU.
    placed = {p.metadata.name: p.spec.node_name for p in pods}
    assert placed == {f"{name}-1-0": "node-0", f"{name}-1-1": "node-1"}
    for pod in pods:
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["WORLD_SIZE"] == "2" and env["GPUFLOW_GPUS_PER_POD"] == "1"
        assert pod.spec.containers[0].resources.limits[crd.RESOURCE_GPU] == "1"
        assert pod.status.phase == "Succeeded"
    steps = {}
    for rank in (0, 1):
        (log_path,) = (tmp_path / "pods").glob(f"default_{name}-1-{rank}_*/worker.log")
        text = log_path.read_text(errors="replace")
        assert served[f"{name}-1-{rank}"] == text
        assert f"rank {rank} of 2 joined (gloo)" in text, text[-2000:]
        steps[rank] = [int(m.group(1)) for m in STEP_LOG.finditer(text)]
        assert len(steps[rank]) >= 2 and steps[rank][-1] == STEPS, text[-2000:]
    if isolated:  # as root: each pod in a network namespace of its own, on its node's
        # bridge; gloo found its peer there (GLOO_SOCKET_IFNAME), not on loopback
        ips = {p.status.pod_ip for p in pods}
        assert len(ips) == 2 and not any(ip.startswith("127.") for ip in ips)
