"""A kubelet's admission of extended resources (gpuflow/sandbox/kubelet/admission.py), and the
sandbox's ProcessKubelet rejecting a pod that asks more GPUs than its node has left."""

from __future__ import annotations

from typing import Any

from gpuflow.sandbox.kubelet.admission import extended_requests, is_extended, refusal
from operators import crd
from operators.kube import KubeApi
from tests.sandbox.conftest import Start, make_pod, wait_phase

GPU, SHARE = crd.RESOURCE_GPU, crd.RESOURCE_GPU_SHARE


def _node(**allocatable: str) -> dict[str, Any]:
    return {"metadata": {"name": "node-0"}, "status": {"allocatable": allocatable}}


def _pod(limits: dict[str, str], init: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "w", "resources": {"limits": limits}}]}
    if init is not None:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    return {"metadata": {"name": "p"}, "spec": spec}


def test_extended_resources_are_the_domain_prefixed_ones_outside_kubernetes_io() -> None:
    assert is_extended(GPU) and is_extended(SHARE)
    assert not is_extended("cpu") and not is_extended("kubernetes.io/batch")
    assert not is_extended("hugepages-2Mi")
    pod = _pod({GPU: "2", "cpu": "4", "memory": "1Gi"}, init={GPU: "3"})
    assert extended_requests(pod) == {GPU: 3}  # the init container's 3 outweighs 2


def test_a_pod_is_refused_for_what_the_node_has_left_beside_the_pods_it_admitted() -> None:
    node = _node(**{GPU: "8", SHARE: "800", "cpu": "1"})
    running = [_pod({GPU: "5"}), _pod({SHARE: "50"})]
    assert refusal(_pod({GPU: "3"}), lambda: node, running) is None
    refused = refusal(_pod({GPU: "4"}), lambda: node, running)
    assert refused is not None and refused.reason == "OutOfnvidia.com/gpu"
    assert refused.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
        "requested: 4, used: 5, capacity: 8"
    )
    assert refused.status() == {"phase": "Failed", "reason": refused.reason,
                                "message": refused.message}  # fmt: skip
    # a node that does not publish a resource has none of it
    refused = refusal(_pod({"example.com/fpga": "1"}), lambda: node, [])
    assert refused is not None and refused.reason == "OutOfexample.com/fpga"
    assert refused.message.endswith("requested: 1, used: 0, capacity: 0")


def test_a_pod_without_extended_resources_never_reads_its_node() -> None:
    def unreachable() -> dict[str, Any]:
        raise AssertionError("read the node")

    assert refusal(_pod({"cpu": "64"}), unreachable, []) is None


def test_the_process_kubelet_rejects_a_pod_asking_more_gpus_than_left(
    api: KubeApi, kubelet: Start
) -> None:
    kubelet(devices={GPU: "4"})  # its Node's nvidia.com/gpu, as the device plugin's
    first = make_pod("first", "import time; time.sleep(60)", grace_s=1)
    first["spec"]["containers"][0]["resources"] = {"limits": {GPU: "3"}}
    api.create_pod("default", first)
    wait_phase(api, "first", "Running")
    second = make_pod("second", "pass")
    second["spec"]["containers"][0]["resources"] = {"limits": {GPU: "2"}}
    api.create_pod("default", second)
    st = wait_phase(api, "second", "Failed")
    assert st["reason"] == "OutOfnvidia.com/gpu"
    assert st["message"].endswith("nvidia.com/gpu, requested: 2, used: 3, capacity: 4")
    assert "containerStatuses" not in st  # never run
    third = make_pod("third", "pass")
    third["spec"]["containers"][0]["resources"] = {"limits": {GPU: "1"}}
    api.create_pod("default", third)  # the one GPU left
    assert wait_phase(api, "third", "Succeeded")["phase"] == "Succeeded"
