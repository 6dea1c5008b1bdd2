"""The cluster and job model: frozen dataclasses, stdlib only.

Every other layer imports from here; this package imports nothing else of gpuflow.
"""

from controller.model.allocation import Allocation, GpuShare
from controller.model.cluster import (
    NO_HOST,
    Cluster,
    Gpu,
    GpuType,
    Group,
    HostRequest,
    Node,
    PairLink,
    PcieLevel,
    Rack,
)
from controller.model.job import WAITING, GpuUse, JobSpec, JobStatus, JobView, Measured, Reason
from controller.model.pool import GpuPool
from controller.model.snapshot import (
    RESTARTING,
    STOPPING,
    Action,
    EditedAllocations,
    Placer,
    Plan,
    PlanError,
    Policy,
    Snapshot,
    TypeRates,
    classify_change,
    validate_plan,
)

__all__ = [
    "NO_HOST",
    "RESTARTING",
    "STOPPING",
    "WAITING",
    "Action",
    "Allocation",
    "Cluster",
    "EditedAllocations",
    "Gpu",
    "GpuPool",
    "GpuShare",
    "GpuType",
    "GpuUse",
    "Group",
    "HostRequest",
    "JobSpec",
    "JobStatus",
    "JobView",
    "Measured",
    "Node",
    "PairLink",
    "PcieLevel",
    "Placer",
    "Plan",
    "PlanError",
    "Policy",
    "Rack",
    "Reason",
    "Snapshot",
    "TypeRates",
    "classify_change",
    "validate_plan",
]
