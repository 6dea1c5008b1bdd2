"""Cluster, node and policy bodies (local mode's LiveCluster as seen over REST)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import PolicyName, Strict, example_config

# "down" (failed, NotReady) wins over "draining" (cordoned, its jobs being preempted),
# which wins over "cordoned" (no new work; its jobs run on).
NodeState = Literal["ready", "cordoned", "draining", "down"]
# The clock times are on: cluster mode's wall clock (Unix seconds), local mode's
# simulated clock (seconds since the simulation began, wall time x time scale).
Clock = Literal["wall", "simulated"]


class GpuSharePublic(BaseModel):
    job: str | None = Field(description="the job's id; null for another tenant's job")
    fraction: float = Field(description="its share of the GPU's compute, (0, 1]")
    name: str | None = Field(default=None, description="the job's name; null where `job` is")
    tenant: str | None = Field(default=None, description="the job's tenant; null where `job` is")


class GpuPublic(BaseModel):
    index: int
    shares: list[GpuSharePublic] = Field(description="the jobs on it; empty when free")
    util: float | None = Field(
        description="busy part of its compute, 0..1 (local mode: the simulator's model; "
        "cluster mode: the node agent's NVML reading); null when not known"
    )


class NodePublic(BaseModel):
    name: str
    rack: int
    gpu_type: str
    gpus: int
    gpus_allocated: float = Field(description="shared GPUs count by fraction")
    jobs: list[str] = Field(description="the caller's jobs on it (an admin's: every job)")
    other_jobs: int = Field(default=0, description="other tenants' jobs on it, not named")
    state: NodeState = Field(
        default="ready",
        description="ready; cordoned (no new work, its jobs run on); draining (cordoned, "
        "its jobs being preempted); down (down wins)",
    )
    gpu_list: list[GpuPublic] = Field(default_factory=list, description="each GPU, by index")


class NodesPublic(BaseModel):
    data: list[NodePublic]
    count: int


# controller.network.loads.LINK_KINDS, for the schema.
LinkKind = Literal["nic-up", "nic-down", "rack-up", "rack-down", "group-up", "group-down"]


class LinkLoadPublic(BaseModel):
    kind: LinkKind
    where: str = Field(
        description="the node (NICs), rack or aggregation group (uplinks) it belongs to;"
        " '<rack or group>/<lane>' for one of an uplink's ECMP lanes"
    )
    load_gbps: float = Field(description="the rates the network allocator gives the flows on it")
    capacity_gbps: float
    jobs: int = Field(description="running jobs whose ring crosses it")


class ClusterPublic(BaseModel):
    name: str
    nodes: int
    gpus: int
    gpus_allocated: float
    running: int
    waiting: int
    finished: int
    policy: str = Field(
        description="the policy the scheduler runs (cluster mode: as the operator last "
        'said; "unknown" before its first round)'
    )
    policy_options: dict[str, Any] = Field(
        default_factory=dict, description="that policy's options in effect"
    )
    clock: Clock = Field(
        description='what now_s and every time of the service is on: "wall" (cluster '
        'mode: Unix seconds) or "simulated" (local mode: seconds of the simulated clock)'
    )
    now_s: float = Field(description="the service's clock now (see clock)")
    time_scale: float
    gpus_free: int | None = Field(
        default=None, description="whole GPUs offered to new jobs (not down, not cordoned)"
    )
    fragmentation: int | None = Field(
        default=None,
        description="free GPUs no waiting job can use: on nodes whose free GPUs are fewer "
        "than every waiting job's request (a request larger than a node wants whole "
        "nodes); 0 when nothing waits",
    )
    link_loads: list[LinkLoadPublic] | None = Field(
        default=None,
        description="load on each NIC and rack uplink that running multi-node jobs cross; "
        "null when no network allocator runs (local mode without GPUFLOW_NETWORK, "
        "cluster mode)",
    )


class NodeTypePublic(BaseModel):
    id: str = Field(description="type-<k>, in order of first node")
    gpu_type: str
    gpus: int
    nic_gbps: float
    numa: list[int] = Field(description="each GPU's NUMA node")
    links: list[list[str]] = Field(
        description="GPU pair links as `nvidia-smi topo -m` prints them: X on the "
        "diagonal, NV<k> (k NVLink lanes), PIX, PXB, PHB, NODE or SYS"
    )
    gbps: list[list[float | None]] = Field(
        description="a GPU pair's peer-to-peer Gbit/s (one direction); null on the diagonal"
    )
    nodes: list[str]


class RackPublic(BaseModel):
    name: str
    uplink_gbps: float
    nodes: list[str]


class TopologyPublic(BaseModel):
    node_types: list[NodeTypePublic]
    racks: list[RackPublic]


class PolicyPublic(BaseModel):
    name: str
    description: str
    active: bool
    options: dict[str, Any] | None = Field(
        default=None,
        description="the options in effect, for the active policy when known (cluster "
        "mode: as the operator last said); null otherwise",
    )


class PoliciesPublic(BaseModel):
    data: list[PolicyPublic]
    count: int


class PolicySwitch(Strict):
    model_config = example_config({"name": "srtf"})

    name: PolicyName
