"""The live cluster's history: GET /api/v1/history/... (api/routes/history.py).

Every series is on the window's bins (`t_s`, each bin's start, `step_s` wide): a mean
over the bin of what was sampled in it, null where nothing was (api/samples/series.py).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.schemas.cluster import Clock

Series = list[float | None]


class HistoryWindow(BaseModel):
    clock: Clock = Field(description="what every time here is on (GET /cluster's clock)")
    from_s: float
    to_s: float
    step_s: float = Field(description="each bin's width")
    sample_s: float = Field(description="the sampling period (settings.history_sample_s)")
    t_s: list[float] = Field(description="each bin's start")


class ClusterHistoryPublic(HistoryWindow):
    gpus: Series
    gpus_allocated: Series = Field(description="shared GPUs count by fraction")
    util: Series = Field(description="mean utilisation of the GPUs with a reading, 0..1")
    mem_used_mib: Series = Field(description="GPU memory used, all GPUs with a reading")
    mem_total_mib: Series
    gpus_unhealthy: Series = Field(description="GPUs reported unhealthy (ECC, lost, down)")
    running: Series = Field(description="jobs holding GPUs")
    waiting: Series = Field(description="the queue's length")
    wait_mean_s: Series = Field(description="mean wait so far of the jobs waiting then")
    wait_max_s: Series = Field(description="the longest wait so far (its largest in the bin)")


class NodeHistoryRow(BaseModel):
    node: str
    gpus_allocated: Series
    util: Series = Field(description="mean of its GPUs' utilisation, 0..1")
    mem_used_mib: Series = Field(description="its GPUs' memory used")


class NodesHistoryPublic(HistoryWindow):
    data: list[NodeHistoryRow] = Field(description="by node name")
    count: int


class GpuHistoryRow(BaseModel):
    index: int
    util: Series = Field(description="0..1")
    allocated: Series = Field(description="the part of it jobs hold, 0..1")
    mem_used_mib: Series
    temperature_c: Series = Field(description="cluster mode, from NVML; null in local mode")
    power_w: Series = Field(description="cluster mode, from NVML; null in local mode")
    ecc_errors: Series = Field(description="uncorrected ECC errors (its largest in the bin)")
    healthy: Series = Field(description="1 healthy, 0 unhealthy at some sample of the bin")


class GpusHistoryPublic(HistoryWindow):
    node: str
    mem_total_mib: int | None = Field(description="each GPU's memory")
    gpus: list[GpuHistoryRow]


class TenantHistoryRow(BaseModel):
    tenant: str
    gpus: Series = Field(description="GPUs its jobs held, shared GPUs by fraction")
    running: Series
    waiting: Series
    wait_max_s: Series = Field(description="its longest wait so far (the largest in the bin)")


class TenantsHistoryPublic(HistoryWindow):
    data: list[TenantHistoryRow] = Field(description="by tenant: a user's own, an admin's all")
    count: int
