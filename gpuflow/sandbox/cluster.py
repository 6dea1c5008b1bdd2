"""A whole gpuflow cluster on one machine: what `gpuflow sandbox up` and `run` start.

gpuflow/sandbox_cmd.py builds a `Sandbox` and uses it as a context manager; leaving
it tears everything down in reverse order, also on errors. Inside, in this process:
the strict Kubernetes API server (kube/) on 127.0.0.1 with graceful pod deletion,
the DLJob CRD (helm/gpuflow/crds/dljob.yaml), one Node per emulated node registered
as a kubelet does (Ready, its address), the node agent per node publishing its GPUs
from a topology file (operators/agent/main.py `run_agent`, a thread each), a
ProcessKubelet per node (kubelet.py), the network (network.py), and the operator
(operators/operator.py, a thread) with `api_url` the REST root of the gpuflow service,
which runs as a subprocess (service.py: `gpuflow serve` in cluster mode on the
bridge's address, its own SQLite database) and writes the jobs' reports into their
DLJobs' `status.train`. The jobs run on it (`sandbox run`, the end-to-end tests)
are gpuflow/sandbox/jobs.py's: `run_jobs` applies DLJobs and waits for them;
`job_results` is the JSON that `sandbox run --json` prints.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from controller.spec.types import GENERIC_GPU, GENERIC_NIC_GBPS, SHORTHAND
from gpuflow.sandbox.kube.apiserver import KubeServer, ServerOptions
from gpuflow.sandbox.kubelet import ProcessKubelet
from gpuflow.sandbox.network import NodeNetwork
from gpuflow.sandbox.service import ApiService
from operators import crd
from operators.agent.main import AgentOptions, run_agent
from operators.kube import API_ERRORS, KubeApi
from operators.leader import LeaseConfig
from operators.operator import Operator, OperatorConfig

log = logging.getLogger(__name__)

Obj = dict[str, Any]
MAX_NODES = 200  # node addresses .10 to .209; as root their pods' blocks fit 118
READY_TIMEOUT_S = 30.0  # CRD served, every Node's GPUs published
# `gpuflow serve`'s imports and migration: a few seconds alone, more on a loaded machine.
SERVICE_TIMEOUT_S = 60.0
NODE_DEVICE = "eth0"  # each node namespace's end of its veth, a port of its cbr0
# The pods' HTB leaf queue: pfifo is on every kernel (docs/bandwidth.md, "Leaf qdisc").
LEAF_QDISC = "pfifo"


class SandboxError(ValueError):
    """Bad input for the sandbox (nodes, job files): one line, exit code 2."""


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
        self.server: KubeServer | None = None
        self.network: NodeNetwork | None = None
        self.kubelets: list[ProcessKubelet] = []
        self.service: ApiService | None = None
        self.operator: Operator | None = None
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Sandbox:
        try:
            self.up()
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
        return self.directory / "kubeconfig"

    def client(self) -> KubeApi:
        assert self.server is not None
        return KubeApi(self.server.api_client())

    def up(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        options = ServerOptions(graceful_pods=True)
        self.server = KubeServer("127.0.0.1", self.config.port, options=options).start()
        self.server.write_kubeconfig(self.kubeconfig)
        self.api = self.client()
        self.api.apply_crd(crd.load_crd_manifest())
        self.api.apply_crd(crd.load_crd_manifest(crd.QUEUE_CRD_PATH))
        self.network = NodeNetwork.create(self.node_names)
        # Started early so that its imports overlap the nodes' start; waited for below.
        self.service = ApiService.start(
            self.network.host_address,
            self.directory,
            self.kubeconfig,
            self.config.train_summary_interval_s,
        )
        for name in self.node_names:
            self.api.create_node(self._node_body(name))
        topology = self._write_topology()
        for name in self.node_names:
            agent = self._agent_options(name, topology)
            self._thread(f"agent-{name}", run_agent, agent, api=self.client(), stop=self.stop_event)
        self._wait_ready()
        for name in self.node_names:
            kubelet = ProcessKubelet(
                self.client(), name, self.network, self.directory, self.config.workdir
            )
            self.kubelets.append(kubelet.start())
        self.service.wait_healthy(SERVICE_TIMEOUT_S)
        log.info("gpuflow service url=%s log=%s", self.service.url, self.service.log_path)
        if self.config.start_operator:
            self.start_operator()

    def start_operator(self) -> None:
        """Start the operator thread (once), its pods given the service's URL."""
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
        self.operator = Operator(self.client(), config)
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

    def _node_body(self, name: str) -> Obj:
        """A Node as a kubelet registers it: Ready, its address, its GPUs as the NVIDIA
        device plugin publishes them; no CPU or memory allocatable, so the operator
        does not count them (the processes share this machine)."""
        assert self.network is not None
        address = self.network.address(name)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "conditions": [ready],
                "addresses": [
                    {"type": "InternalIP", "address": address},
                    {"type": "Hostname", "address": name},
                ],
                **_device_plugin_gpus(self.config.gpus_per_node),
            },
        }

    def _write_topology(self) -> Path:
        """One node type per node, named after it, in the format of `gpuflow agent run
        --topology-file` (operators/agent/topology_file.py): a generic PCIe node with
        the sandbox's GPU count and the node's NIC speed."""
        path = self.directory / "topology.yaml"
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
        if self.service is not None:
            self.service.stop()
            self.service = None
        if self.network is not None:
            self.network.teardown()
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _device_plugin_gpus(gpus: int) -> Obj:
    """A node's `nvidia.com/gpu` capacity and allocatable, as the NVIDIA device plugin
    has the kubelet publish them on a real node (there is none here): what worker
    pods holding whole GPUs request (docs/helm.md, "GPUs as the kubelet counts them")."""
    values = {crd.RESOURCE_GPU: str(gpus)}
    return {"capacity": dict(values), "allocatable": dict(values)}
