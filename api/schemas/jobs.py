"""Job bodies: JobCreate (a validated spec), JobPublic, JobsPublic, events, metrics."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AwareDatetime,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)

from api.schemas.common import INT32_MAX, WHOLE, Name, Public, Strict, example_config
from controller.model.precision import DEFAULT_PRECISION, Precision

# Whole numbers are strict: `true` is not 1 GPU, nor 1.5 a GPU count (4.0 is 4).
Gpus = Annotated[int, Field(ge=1, le=4096, strict=True), WHOLE]
Count = Annotated[int, Field(ge=1, le=INT32_MAX, strict=True), WHOLE]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]

# The furthest deadline a job may give, as its longest duration_s (about 32 years).
MAX_DEADLINE_S = 1e9


def _only_env_names(schema: dict[str, Any]) -> None:
    """Keys not matching EnvName are refused (a 422): say so, as patternProperties
    alone lets any other key through."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") == "object":
            branch["additionalProperties"] = False


JOB_EXAMPLE: dict[str, JsonValue] = {
    "name": "bert-finetune",
    "num_gpus": 4,
    "model": "bert",
    "duration_s": 3600,
    "priority": 0,
}


class JobCreate(Strict):
    """A job as submitted; mirrors controller.model.JobSpec."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [JOB_EXAMPLE],
            # What _some_work checks, declared: one of the two, a number.
            "anyOf": [
                {"required": ["duration_s"], "properties": {"duration_s": {"type": "number"}}},
                {"required": ["iterations"], "properties": {"iterations": {"type": "number"}}},
            ],
            # What _one_deadline checks, declared: a time or an offset, never both.
            "not": {"required": ["deadline", "deadline_s"]},
        },
    )

    name: Name = "job"
    num_gpus: Gpus
    min_gpus: Gpus | None = Field(default=None, description="elastic jobs: fewest GPUs")
    max_gpus: Gpus | None = Field(default=None, description="elastic jobs: most GPUs")
    model: Name = Field(default="generic", description="catalogue model name")
    duration_s: float | None = Field(default=None, gt=0, le=1e9)
    iterations: float | None = Field(default=None, gt=0, le=1e15, validate_default=True)
    batch_size: Count | None = None
    gpu_mem_mib: Count | None = Field(default=None, description="may share")
    priority: Annotated[int, Field(ge=-1000, le=1000, strict=True), WHOLE] = 0
    precision: Precision = Field(
        default=DEFAULT_PRECISION,
        description="what the job trains in (controller.model.precision): sets its speed "
        "on a GPU where no rate was measured for its model",
    )
    # A deadline, as a UTC time or in seconds after submission (one of the two);
    # neither: best-effort. The route turns `deadline` into `deadline_s`.
    deadline: AwareDatetime | None = Field(
        default=None,
        description="when the job must have finished: an ISO 8601 time with its zone",
    )
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEADLINE_S,
        description="the deadline in seconds after submission",
    )
    # Cluster mode: the worker container of the job's DLJob (local mode ignores them).
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        # No whitespace by either meaning: JSON Schema's (ECMA-262: not U+0085, but
        # U+FEFF) and the server's (Unicode White_Space: U+0085, not U+FEFF).
        pattern=r"^[^\s\x85\uFEFF]+$",
        description="cluster mode: worker image (default: the service's GPUFLOW_KUBE_IMAGE)",
    )
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=64, description="cluster mode: the container's command"
    )
    env: dict[EnvName, Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None,
        max_length=64,
        description="cluster mode: the container's environment",
        json_schema_extra=_only_env_names,
    )

    @field_validator("min_gpus")
    @classmethod
    def _min_not_above_num(cls, v: int | None, info: ValidationInfo) -> int | None:
        num = info.data.get("num_gpus")
        if v is not None and num is not None and v > num:
            raise ValueError("min_gpus must be <= num_gpus")
        return v

    @field_validator("max_gpus")
    @classmethod
    def _max_not_below_num(cls, v: int | None, info: ValidationInfo) -> int | None:
        num = info.data.get("num_gpus")
        if v is not None and num is not None and v < num:
            raise ValueError("max_gpus must be >= num_gpus")
        return v

    @model_validator(mode="after")
    def _one_deadline(self) -> JobCreate:
        if self.deadline is not None and self.deadline_s is not None:
            raise ValueError("give deadline or deadline_s, not both")
        return self

    def deadline_after(self, now: datetime) -> float | None:
        """The deadline in seconds after `now` (None: none); ValueError if it is not
        after `now`."""
        if self.deadline is None:
            return self.deadline_s
        seconds = (self.deadline - now).total_seconds()
        if seconds <= 0:
            raise ValueError(f"{self.deadline.isoformat()} is not in the future")
        if seconds > MAX_DEADLINE_S:
            raise ValueError(f"{self.deadline.isoformat()} is more than {MAX_DEADLINE_S:g} s away")
        return seconds

    @field_validator("iterations")
    @classmethod
    def _some_work(cls, v: float | None, info: ValidationInfo) -> float | None:
        if v is None and info.data.get("duration_s") is None:
            raise ValueError("give duration_s or iterations")
        return v


class TypeThroughputPublic(Public):
    """A job's speed on one GPU type it has run on (controller.model.type_throughput)."""

    gpu_type: str = Field(examples=["A100-SXM4-40GB"])
    steps_per_s: float
    samples_per_s: float | None = Field(description="steps per second times its batch")
    gpus: int = Field(description="the whole GPUs of the type it ran on")
    batch_size: int | None
    measured_s: float = Field(
        description="when: cluster mode, the report's Unix time; local mode, simulated seconds"
    )
    source: str = Field(
        examples=["measured"],
        description="measured: the job's own reports (cluster mode); simulated: local mode's"
        " performance model",
    )


class JobPublic(Public):
    id: str
    name: str
    tenant: str
    user_id: int
    status: str = Field(examples=["Running"])
    num_gpus: int
    min_gpus: int
    max_gpus: int
    model: str
    duration_s: float | None
    iterations: float | None
    batch_size: int | None
    gpu_mem_mib: int | None
    priority: int
    precision: str
    deadline_s: float | None = Field(
        default=None, description="seconds after submission by which it must finish"
    )
    deadline: datetime | None = Field(
        default=None, description="GET /jobs/{id}: the deadline, its submission plus deadline_s"
    )
    predicted_finish_s: float | None = Field(
        default=None,
        description="GET /jobs/{id}, with a deadline: seconds after submission it finishes, as"
        " the what-if forecasts under the active policy (a finished job's actual finish)",
    )
    predicted_finish: datetime | None = Field(
        default=None, description="its submission plus predicted_finish_s"
    )
    on_track: bool | None = Field(
        default=None,
        description="predicted_finish_s within deadline_s (false once refused; null: unknown)",
    )
    reason_code: str | None
    reason_message: str | None
    progress: float
    attained_gpu_s: float
    restarts: int
    nodes: str
    submit_s: float | None
    first_start_s: float | None
    finish_s: float | None
    queue_position: int | None = Field(
        default=None,
        description="while waiting: 1-based place in the active policy's order (GET /queue)",
    )
    created_at: datetime
    updated_at: datetime
    type_throughput: list[TypeThroughputPublic] | None = Field(
        default=None,
        description="GET /jobs/{id}: its speed on each GPU type it has run on, types by name",
    )
    dljob_namespace: str | None = Field(default=None, description="cluster mode: its DLJob")
    dljob_name: str | None = None
    dljob_uid: str | None = None


class JobCreated(JobPublic):
    metrics_token: str = Field(description="the job's own token for POST /jobs/{id}/metrics")


class JobsPublic(Public):
    data: list[JobPublic]
    count: int


class WaitReason(Public):
    job_id: str
    status: str
    waiting: bool
    code: str | None = Field(examples=["InsufficientGpus"])
    message: str | None


class JobEventPublic(Public):
    kind: str = Field(examples=["started"])
    sim_s: float | None
    detail: str
    at: datetime


class JobEventsPublic(Public):
    data: list[JobEventPublic]
    count: int


class JobMetricCreate(Strict):
    name: Name = Field(examples=["loss"])
    value: float = Field(ge=-1e300, le=1e300)
    step: Annotated[int, Field(ge=0, le=INT32_MAX, strict=True), WHOLE] | None = None


class JobMetricsCreate(Strict):
    model_config = example_config({"metrics": [{"name": "loss", "value": 0.7}]})

    metrics: list[JobMetricCreate] = Field(min_length=1, max_length=1000)


class JobMetricPublic(Public):
    name: str
    value: float
    step: int | None
    at: datetime


class JobMetricsPublic(Public):
    data: list[JobMetricPublic]
    count: int
