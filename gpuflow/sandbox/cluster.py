"""A whole gpuflow cluster on one machine: what `gpuflow sandbox up` and `run` start.

gpuflow/sandbox_cmd.py builds a `Sandbox` and uses it as a context manager; leaving
it tears everything down in reverse order, also on errors. Inside: the real Kubernetes
control plane (controlplane.py: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler as subprocesses on 127.0.0.1; pods reach the API server at the bridge's
address), the chart's CRDs (helm/gpuflow/crds/*.yaml) installed as Helm installs them,
and in this process a ProcessKubelet per node (kubelet.py, with its node's own
credentials: it registers the Node, renews its Lease, runs the pods bound to it and
serves their logs to `kubectl logs`), the network (network.py), the node agent per
node publishing its GPUs from a topology file (operators/agent/main.py `run_agent`, a
thread each), and the operator (operators/operator.py, a thread) with `api_url` the
REST root of the gpuflow service. The operator runs as the chart's operator ServiceAccount, bound to
a ClusterRole of the chart's own rules (operator_identity.py), so that a verb the
role lacks is refused here as on a cluster; the agents and the service use the
admin's kubeconfig (group system:masters). The service runs as a
subprocess (service.py: `gpuflow serve` in cluster mode on the
bridge's address, its own SQLite database) and writes the jobs' reports into their
DLJobs' `status.train`. The jobs run on it (`sandbox run`, the end-to-end tests)
are gpuflow/sandbox/jobs.py's: `run_jobs` applies DLJobs and waits for them;
`job_results` is the JSON that `sandbox run --json` prints. A `bare` sandbox
(`sandbox up --bare`) starts only the control plane, the network and the kubelets:
the chart brings the rest (docs/helm.md, "Into the sandbox").

Before anything starts, `up` cleans what dead sandboxes left (remains.py
`clean_dead`) and records this one: its id names its network, and every process it
starts (control plane, service, pods) is added to the record, which a reaper
process (reaper.py) cleans if this process dies without tearing down, kill -9
included. A clean `down` removes the record, then lets the reaper go.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from controller.spec.types import GENERIC_GPU, GENERIC_NIC_GBPS, SHORTHAND
from gpuflow.sandbox.controlplane import ControlPlane, ControlPlaneOptions
from gpuflow.sandbox.kubelet import ProcessKubelet
from gpuflow.sandbox.kubelet.pki import write_kubelet_serving
from gpuflow.sandbox.network import NodeNetwork
from gpuflow.sandbox.operator_identity import OperatorIdentity, create_operator_identity
from gpuflow.sandbox.reaper import Reaper
from gpuflow.sandbox.remains import Remains, clean_dead
from gpuflow.sandbox.service import ApiService
from operators import crd
from operators.agent.main import AgentOptions, run_agent
from operators.kube import API_ERRORS, KubeApi, api_client, error_message
from operators.kube.leader import LeaseConfig
from operators.operator import Operator, OperatorConfig

log = logging.getLogger(__name__)

Obj = dict[str, Any]
MAX_NODES = 200  # node addresses .10 to .209; as root their pods' blocks fit 118
READY_TIMEOUT_S = 30.0  # CRD served, every Node's GPUs published
# `gpuflow serve`'s imports and migration: a few seconds alone, more on a loaded machine.
SERVICE_TIMEOUT_S = 60.0
# The agents' and kubelets' informers are daemon threads that may still hold watches
# when the control plane stops, and kube-apiserver waits for open watches before it
# exits (10 s and SIGKILL, measured): its store is thrown away, so a short grace.
CONTROL_PLANE_STOP_S = 2.0
NODE_DEVICE = "eth0"  # each node namespace's end of its veth, a port of its cbr0
# The pods' HTB leaf queue: pfifo is on every kernel (docs/bandwidth.md, "Leaf qdisc").
LEAF_QDISC = "pfifo"
GPU_NODE_LABEL = "nvidia.com/gpu.present"  # GPU Feature Discovery's, the chart agent's selector


class SandboxError(ValueError):
    """Bad input for the sandbox (nodes, job files): one line, exit code 2."""


class SandboxStartError(RuntimeError):
    """The sandbox did not start; `sandbox up|run` print it as one line, exit 1."""


def parse_nodes(text: str) -> tuple[int, int]:
    """`NODESxGPUS` (e.g. `2x4`) as (nodes, GPUs per node)."""
    m = SHORTHAND.fullmatch(text)
    if not m or not 1 <= int(m[1]) <= MAX_NODES or not 1 <= int(m[2]) <= 16:
        raise SandboxError(f"--nodes {text!r}: expected NODESxGPUS, 1..{MAX_NODES} x 1..16")
    return int(m[1]), int(m[2])


@dataclass(frozen=True)
class SandboxConfig:
    nodes: int = 1
    gpus_per_node: int = 4
    policy: str = "fifo"
    placement: str = "consolidated"  # the operator's placer (controller/placement)
    port: int = 0  # the API server's; 0: any free port
    directory: Path | None = None  # None: a temporary directory, removed at the end
    workdir: Path | None = None  # the processes' cwd; None: the repository root
    interval_s: float = 2.0  # the operator's longest gap between rounds
    # The service writes a job's status.train at most this often (its default is 5 s;
    # a short one lets `run` read a finished job's last reports soon after it ends).
    train_summary_interval_s: float = 1.0
    start_operator: bool = True  # False: the caller starts it (`run_jobs` does)
    # Only the control plane, the network and the kubelets (their Nodes labelled as
    # GPU nodes): the operator, agents, API and CRDs come from `helm install`.
    bare: bool = False
    # Each node's NIC in Gbit/s, one figure for all or one per node: what the allocator
    # shares and each agent shapes its eth0 to as root (a few 100 Mbit/s: measurable).
    nic_gbps: tuple[float, ...] = (GENERIC_NIC_GBPS,)
    network: str = "fair"  # the operator's --network
    # The operator's --policy-opt items, as (policy or "" for any, key, value).
    policy_options: tuple[tuple[str, str, Any], ...] = ()

    def __post_init__(self) -> None:
        if len(self.nic_gbps) not in (1, self.nodes) or min(self.nic_gbps, default=0) <= 0:
            raise SandboxError(f"nic_gbps: one positive or {self.nodes}, not {self.nic_gbps}")

    def node_nic_gbps(self, index: int) -> float:
        return self.nic_gbps[index if len(self.nic_gbps) > 1 else 0]


class Sandbox:
    """Start with `with Sandbox(config) as sb:`; `sb.kubeconfig`, `sb.api`, `sb.service`."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.node_names = [f"node-{i}" for i in range(config.nodes)]
        self.stop_event = threading.Event()
        self._tmp: str | None = None
        self.control_plane: ControlPlane | None = None
        self.network: NodeNetwork | None = None
        self.kubelets: list[ProcessKubelet] = []
        self.service: ApiService | None = None
        self.operator: Operator | None = None
        self.operator_identity: OperatorIdentity | None = None
        self.remains: Remains | None = None
        self.reaper: Reaper | None = None
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Sandbox:
        """up(); on a failure, down() and raise: an API server's refusal (a CRD it finds
        invalid) as SandboxStartError with the server's one-line message."""
        try:
            self.up()
        except API_ERRORS as exc:
            self.down()
            raise SandboxStartError(f"the API server refused: {error_message(exc)}") from exc
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def directory(self) -> Path:
        if self.config.directory is not None:
            return self.config.directory
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="gpuflow-sandbox-")
        return Path(self._tmp)

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (a copy of the control plane's)."""
        return self.directory / "kubeconfig"

    @property
    def url(self) -> str:
        """The API server's URL."""
        assert self.control_plane is not None
        return self.control_plane.url

    def control_plane_release(self) -> dict[str, str]:
        """What `sandbox run --json` names as "control_plane": the Kubernetes release
        and the store's, as {"kubernetes": "v1.34.4", "store": "etcd 3.6.4"}."""
        assert self.control_plane is not None
        return {"kubernetes": self.control_plane.version, "store": self.control_plane.store}

    def client(self) -> KubeApi:
        """A KubeApi of its own (its connection pool) with the admin's credentials."""
        return KubeApi(api_client(str(self.kubeconfig)))

    def up(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for dead in clean_dead():
            log.warning("removed what a dead sandbox left id=%s", dead)
        self.remains = remains = Remains.open(self.directory, temporary=self._tmp is not None)
        self.reaper = Reaper.start(remains, self.directory / "reaper.log")
        # First: pods in network namespaces reach the API server at the bridge's address.
        self.network = NodeNetwork.create(self.node_names, tag=remains.id)
        pod_address = self.network.host_address if self.network.isolated else None
        options = ControlPlaneOptions(
            nodes=tuple(self.node_names), port=self.config.port, pod_address=pod_address
        )
        self.control_plane = ControlPlane(
            self.directory / "controlplane", options=options, on_start=remains.add
        )
        self.control_plane.start()
        shutil.copyfile(self.control_plane.kubeconfig, self.kubeconfig)
        self.kubeconfig.chmod(0o600)
        self.api = self.client()
        if not self.config.bare:
            for path in sorted(crd.CRD_PATH.parent.glob("*.yaml")):  # as `helm install` does
                self.api.apply_crd(crd.load_crd_manifest(path))
            # Started early so that its imports overlap the nodes' start; waited for below.
            self.service = ApiService.start(
                self.network.host_address,
                self.directory,
                self.kubeconfig,
                self.config.train_summary_interval_s,
                on_start=remains.add,
            )
        for name in self.node_names:  # each registers its Node
            node_api = KubeApi(api_client(str(self.control_plane.node_kubeconfig(name))))
            kubelet = ProcessKubelet(
                node_api,
                name,
                self.network,
                self.directory,
                self.config.workdir,
                dns_api=self.client(),  # the cluster DNS's part: the admin's
                devices=_device_plugin_gpus(self.config.gpus_per_node),
                on_start=remains.add,
                apiserver_host=pod_address,
                tls=write_kubelet_serving(
                    self.control_plane.ca_file.parent, name, self.network.address(name)
                ),
            )
            self.kubelets.append(kubelet.start())
        topology = self._write_topology()
        if self.config.bare:
            for name in self.node_names:  # GPU Feature Discovery's label: the agent's selector
                self.api.patch_node(name, {"metadata": {"labels": {GPU_NODE_LABEL: "true"}}})
            return
        for name in self.node_names:
            agent = self._agent_options(name, topology)
            self._thread(f"agent-{name}", run_agent, agent, api=self.client(), stop=self.stop_event)
        self._wait_ready()
        assert self.service is not None
        self.service.wait_healthy(SERVICE_TIMEOUT_S)
        log.info("gpuflow service url=%s log=%s", self.service.url, self.service.log_path)
        if self.config.start_operator:
            self.start_operator()

    @property
    def topology_file(self) -> Path:
        """The node types the agents publish (`agent run --topology-file`), one per
        node, named after it (`--node-type=$(NODE_NAME)`)."""
        return self.directory / "topology.yaml"

    def start_operator(self) -> None:
        """Start the operator thread (once), its pods given the service's URL, under
        the chart's operator ServiceAccount (`operator_identity`)."""
        if self.operator is not None:
            return
        assert self.service is not None
        config = OperatorConfig(
            identity=f"sandbox:{os.getpid()}",
            policy=self.config.policy,
            placement=self.config.placement,
            interval_s=self.config.interval_s,
            lease=LeaseConfig(retry_s=0.5),
            api_url=self.service.url,
            network=self.config.network,
            policy_options=self.config.policy_options,
        )
        self.operator_identity = identity = create_operator_identity(
            self.api, self.directory / "operator.kubeconfig"
        )
        self.operator = Operator(KubeApi(api_client(str(identity.kubeconfig))), config)
        self._thread("operator", self.operator.run)

    def _thread(self, name: str, target: Any, *args: Any, **kwargs: Any) -> None:
        t = threading.Thread(target=target, args=args, kwargs=kwargs, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _agent_options(self, name: str, topology: Path) -> AgentOptions:
        """The node's agent: its node type from the topology file and, as root, the
        pods' egress shaped on the node's eth0 (its veth end) inside its namespace. Without
        namespaces the nodes are this machine, whose devices are not ours to shape:
        the agent then only reports the rates the pods ask for."""
        assert self.network is not None
        return AgentOptions(
            name,
            topology_file=str(topology),
            node_type=name,
            interval_s=30.0,
            enforce_bandwidth=self.network.isolated,
            interface=NODE_DEVICE,
            netns=self.network.namespaces.get(name),
            leaf_qdisc=LEAF_QDISC,
        )

    def _write_topology(self) -> Path:
        """One node type per node, named after it, in the format of `gpuflow agent run
        --topology-file` (operators/agent/topology_file.py): a generic PCIe node with
        the sandbox's GPU count and the node's NIC speed."""
        path = self.topology_file
        types = {
            name: {
                "gpu": GENERIC_GPU,
                "gpus": self.config.gpus_per_node,
                "nic_gbps": self.config.node_nic_gbps(i),
            }
            for i, name in enumerate(self.node_names)
        }
        path.write_text(yaml.safe_dump({"node_types": types}))
        return path

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                self.api.list_dljobs("default")
                nodes = [self.api.get_node(n) for n in self.node_names]
                if all(
                    crd.ANN_NODE_GPUS in (n["metadata"].get("annotations") or {}) for n in nodes
                ):
                    return
            except API_ERRORS:
                pass  # the CRD is not served yet
            if time.monotonic() > deadline:
                raise RuntimeError("the sandbox did not become ready (CRD, node GPUs)")
            time.sleep(0.05)

    def down(self) -> None:
        """Stop everything that was started, last first; each step whatever the others did."""
        self.stop_event.set()
        if self.operator is not None:
            self.operator.stop()
        for t in self._threads:
            t.join(timeout=10)
        for kubelet in self.kubelets:
            kubelet.stop()
        self.kubelets.clear()
        # The service and the control plane at once: each waits for the other's end of
        # the service's watches (the service joins its watching threads, 2 s each).
        service = threading.Thread(target=self.service.stop) if self.service else None
        if service is not None:
            service.start()
        if self.control_plane is not None:
            self.control_plane.stop(CONTROL_PLANE_STOP_S)
            self.control_plane = None
        if service is not None:
            service.join()
            self.service = None
        if self.network is not None:
            self.network.teardown()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        # Torn down: the record goes, then the reaper (which finds none) exits.
        if self.remains is not None:
            self.remains.close()
            self.remains = None
        if self.reaper is not None:
            self.reaper.stop()
            self.reaper = None


def _device_plugin_gpus(gpus: int) -> dict[str, str]:
    """A node's `nvidia.com/gpu`, as the NVIDIA device plugin has the kubelet publish
    it on a real node (there is none here): what worker pods holding whole GPUs
    request (docs/helm.md, "GPUs as the kubelet counts them")."""
    return {crd.RESOURCE_GPU: str(gpus)}
