"""What a node offers and what a task asks for, in every resource a pod requests.

The resource-aware vocabulary of gpuflow: CPU in milli-cores, host memory in MiB,
GPUs of one model per node, each GPU divisible in milli-GPUs (1,000 = one GPU), as
Kubernetes pods with a GPU-sharing device plugin ask for them (Alibaba's
open-gpu-share: `alibabacloud.com/gpu-milli`, `gpu-count`, `gpu-card-model`). The
openb loaders (`controller.traces.formats.alibaba.load_openb_tasks`,
`load_openb_node_resources`) produce these types; `experiments.packing.state` turns a
list of nodes into the arrays the placers score. Stdlib only, like
`controller.model`, so that the model can adopt them without a new dependency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# One GPU in milli-GPUs: the unit of open-gpu-share's `gpu-milli` request.
MILLI_PER_GPU = 1000


class ResourceError(ValueError):
    """A node or task description that no cluster could honour (negative, mixed)."""


@dataclass(frozen=True, slots=True)
class NodeResources:
    """A node's allocatable resources: `gpus` GPUs of `gpu_model` ("" with no GPU)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    gpu_model: str = ""

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.gpus < 0:
            raise ResourceError(f"node {self.name!r}: resources must be >= 0")
        if self.gpus > 0 and not self.gpu_model:
            raise ResourceError(f"node {self.name!r}: a GPU node needs a GPU model")


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """A single-node task (a pod): CPU, memory, and either no GPU, `num_gpus` whole
    GPUs (`gpu_milli` 1000), or a share of one GPU (`num_gpus` 1, `gpu_milli` < 1000).
    `gpu_models` lists the GPU models it accepts; empty accepts any."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpus: int = 0
    gpu_milli: int = 0
    gpu_models: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.num_gpus < 0:
            raise ResourceError(f"task {self.name!r}: requests must be >= 0")
        if (self.num_gpus == 0) != (self.gpu_milli == 0):
            raise ResourceError(f"task {self.name!r}: num_gpus and gpu_milli are 0 together")
        if not 0 <= self.gpu_milli <= MILLI_PER_GPU:
            raise ResourceError(f"task {self.name!r}: gpu_milli must be in 0..{MILLI_PER_GPU}")
        if self.is_share and self.num_gpus != 1:
            raise ResourceError(f"task {self.name!r}: a GPU share needs num_gpus 1")

    @property
    def is_share(self) -> bool:
        """True when the task takes part of one GPU."""
        return 0 < self.gpu_milli < MILLI_PER_GPU

    @property
    def total_gpu_milli(self) -> int:
        """The GPU capacity the task takes, in milli-GPUs."""
        return self.num_gpus * self.gpu_milli

    def accepts(self, gpu_model: str) -> bool:
        """Whether a node with `gpu_model` GPUs may hold the task (its GPU-model
        constraint; a GPU task never runs on a node without GPUs)."""
        if self.num_gpus == 0:
            return True
        if not gpu_model:
            return False
        return not self.gpu_models or gpu_model in self.gpu_models

    def shape(self) -> tuple[int, int, int, str]:
        """(CPU, milli-GPU per GPU, GPUs, accepted models) — the task's kind, as FGD's
        simulator groups pods into the target workload (its `PodResource`)."""
        return (self.cpu_milli, self.gpu_milli, self.num_gpus, "|".join(sorted(self.gpu_models)))
