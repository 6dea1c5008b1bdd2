"""gpuflow's `fragmentation-aware` packer: FGD's fragmentation gradient plus the GPUs a
node's CPU can no longer feed, against the workload mix learned from the arrivals.

Published (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC 2023, §4.1 eq. 1-2 and §5 Alg. 1):
the node fragmentation F_n(M) = sum_m p_m F_n(m), its growth when a task is placed
(`controller.packing.fragmentation.TargetWorkload.gradient`), and the score of their
simulator (`FGDScore`: sigmoid of the drop in GPUs x 100, truncated), ties to the
run's node order as for every packer of `controller.packing.placers`.

Ours:

- The CPU side is first-class. In FGD a node's idle GPUs become fragments to a kind
  only once its free CPU drops below what that kind asks (Fig. 4 Q4): a step per
  kind, so placing a CPU-only task on a GPU node costs nothing until a step is
  crossed, and which node it takes is left to ties. We add the GPU capacity the
  node's CPU can no longer feed at the mix's ratio,

      S_n = max(0, G_n - C_n / r),   r = sum_m p_m cpu_m / sum_m p_m gpu_m,

  with G_n the node's free milli-GPUs, C_n its free milli-cores and r the CPU the
  mix asks per milli-GPU (CPU-only tasks included: they take the same cores). A
  task goes where ΔF_n(M) + ΔS_n is least (both in milli-GPUs), scored as FGD
  scores ΔF_n(M). So CPU-only tasks go to CPU-rich nodes (on openb the 2-GPU T4
  nodes with 104 cores) and GPU tasks that ask much CPU to nodes with CPU to spare,
  keeping the 8-GPU nodes' 12 cores per GPU for the GPU tasks.
- The mix is learned online: every kind of the tasks that asked so far (this
  packer's own `place` calls, placed or not), rebuilt at each of the first
  `MIX_REFRESH_TASKS` tasks and then every `MIX_REFRESH_TASKS`, instead of a target
  computed beforehand from the whole trace, which a scheduler does not have (the
  `target` the experiment passes is not used). Every kind, where FGD keeps the
  most popular covering 95 % (`POPULARITY_THRESHOLD`): on openb that cut drops the
  2-, 4- and 8-GPU kinds, 0.9 % of the pods but 7 % of the GPUs asked, so FGD never
  keeps a node whole for them; keeping every kind measured 0.08 points more on
  seeds 42-44.

Host memory stays out of the score, as in FGD. Measured on openb (seeds 42, 43) and
left out: memory in F_n(M) (a kind lacking memory sees every idle GPU as fragment:
0.08 and 0.34 points below FGD), memory in S_n beside CPU (within 0.03 points of
CPU alone), S_n at 0.5, 1.5 or 2 x its weight (0.03-0.05 below) and S_n as a tie-break of FGD's
score only (0.03-0.05 below the sum); docs/placement.md has the figures.

Called by `controller.packing.experiment` through `controller.packing.registry`.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from controller.packing.fragmentation import FloatArray, TargetWorkload
from controller.packing.placers import FgdPacker, sigmoid_score
from controller.packing.resources import TaskRequest
from controller.packing.state import ClusterState, IntArray, Placement

# The learned mix keeps every kind (module docstring).
MIX_COVERAGE = 1.0
# How often the learned mix is rebuilt: a rebuild sorts the kinds seen (~100 on
# openb); every 64 tasks the mix lags the arrivals by under 1 % of a run's ~10,800.
MIX_REFRESH_TASKS = 64


class LearnedMix:
    """The kinds of the tasks seen so far and FGD's target workload built from them,
    keeping the most popular kinds that cover `threshold` of the tasks."""

    def __init__(self, threshold: float = MIX_COVERAGE) -> None:
        self.threshold = threshold
        self.counts: Counter[tuple[int, int, int, str]] = Counter()
        self.target: TargetWorkload | None = None
        self._since_refresh = 0

    def observe(self, task: TaskRequest) -> TargetWorkload:
        """Count `task` and return the current target workload."""
        self.counts[task.shape()] += 1
        self._since_refresh += 1
        early = self.counts.total() <= MIX_REFRESH_TASKS
        if self.target is None or early or self._since_refresh >= MIX_REFRESH_TASKS:
            self.target = TargetWorkload.from_counts(self.counts, self.threshold)
            self._since_refresh = 0
        return self.target


def cpu_per_gpu_milli(target: TargetWorkload) -> float:
    """r: the milli-cores the mix asks per milli-GPU it asks (module docstring)."""
    gpu = float(target.share @ (target.gpu_milli * target.num_gpus))
    cpu = float(target.share @ target.cpu_milli)
    return cpu / gpu if gpu > 0 else float("inf")


def stranding_growth(
    state: ClusterState, nodes: IntArray, task: TaskRequest, cpu_per_gpu: float
) -> FloatArray:
    """ΔS_n of placing `task` on each of `nodes`: the growth of the free milli-GPUs
    that the node's free CPU cannot feed at `cpu_per_gpu` milli-cores per milli-GPU
    (none when the mix asks no GPU: then no GPU is worth keeping CPU for)."""
    if not np.isfinite(cpu_per_gpu) or cpu_per_gpu <= 0:
        return np.zeros(nodes.size)
    gpu = state.gpu_left_milli[nodes].sum(axis=1).astype(np.float64)
    cpu = state.cpu_left[nodes].astype(np.float64)
    before = np.maximum(0.0, gpu - cpu / cpu_per_gpu)
    after = np.maximum(0.0, gpu - task.total_gpu_milli - (cpu - task.cpu_milli) / cpu_per_gpu)
    growth: FloatArray = after - before
    return growth


class FragmentationAwarePacker(FgdPacker):
    """FGD's score on ΔF_n(M) + ΔS_n of the learned mix (module docstring)."""

    name = "fragmentation-aware"

    def __init__(
        self,
        rng: np.random.Generator,
        target: TargetWorkload,
        node_order: IntArray | None = None,
    ) -> None:
        super().__init__(rng, target, node_order)
        self.mix = LearnedMix()

    def place(self, state: ClusterState, task: TaskRequest) -> Placement | None:
        # Every task that asks counts in the mix, placed or not.
        self.target = self.mix.observe(task)
        return super().place(state, task)

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        growth = self.target.gradient(state, nodes, task)
        stranded = stranding_growth(state, nodes, task, cpu_per_gpu_milli(self.target))
        if not task.is_share:
            return sigmoid_score(-(growth + stranded)), None
        # Scores are >= 0, so -1 marks the GPUs that cannot hold the share; S_n does
        # not depend on which GPU of the node takes it.
        cost = np.nan_to_num(growth) + stranded[:, None]
        per_gpu = np.where(np.isnan(growth), -1, sigmoid_score(-cost))
        return per_gpu.max(axis=1), per_gpu.argmax(axis=1)
