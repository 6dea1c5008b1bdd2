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

- A look-ahead over the mix for shares. FGD counts a GPU piece of L free milli-GPUs
  as L x P(d_m > L), the part of the mix it cannot hold now; a piece of 340 that the
  320-milli tasks (4 % of openb's) would fill weighs almost as much as one of 190
  that only the rare shares of at most 160 fit. W(L) (`piece_waste_milli`) is the
  idle the piece is expected to keep in the end: the mix's 1-GPU kinds keep
  arriving, one that fits lands on the piece with chance min(1, P(L) / 0.1)
  (`PIECE_REACH`), and W(L - d_m) follows. A share's cost on GPU g adds
  2 ΔW, ΔW = W(R_g - d) - W(R_g) (`LOOKAHEAD_WEIGHT`: 1 gave 95.96 %, 2 95.99 %
  over 10 seeds). Whole-GPU tasks empty their GPUs (W(0) = 0 from W(1000) on every
  node alike), so their choice is unchanged.

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
from controller.packing.resources import MILLI_PER_GPU, TaskRequest
from controller.packing.state import ClusterState, IntArray, Placement

# The learned mix keeps every kind (module docstring).
MIX_COVERAGE = 1.0
# How often the learned mix is rebuilt: a rebuild sorts the kinds seen (~100 on
# openb); every 64 tasks the mix lags the arrivals by under 1 % of a run's ~10,800.
MIX_REFRESH_TASKS = 64
# The look-ahead W (`piece_waste_milli`): a piece that a share P of the tasks fits is
# reached by one of them with chance min(1, P / PIECE_REACH). 0.1: on openb at the end
# of a run ~1,000 GPUs hold a 190-milli piece and ~140 tasks of at most 160 milli (1.5 %
# of the tasks) arrive, so one piece in seven is reached; 0.015 / 0.1 = 0.15.
PIECE_REACH = 0.1
# ΔW's weight beside ΔF_n(M) + ΔS_n, both in milli-GPUs: measured on openb, 10 seeds
# at 130 %: 1 gave 95.96 %, 2 95.99 % (docs/placement.md).
LOOKAHEAD_WEIGHT = 2.0


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


def piece_waste_milli(target: TargetWorkload, reach: float = PIECE_REACH) -> FloatArray:
    """W(L) for L = 0..1000: the milli-GPUs a GPU with L free is expected to leave idle
    in the end, when the mix's 1-GPU kinds (shares and whole GPUs; p_m renormalised
    over them) keep arriving (module docstring):

        W(L) = L                                         if no kind fits (d_m > L for all)
             = (1 - a) L + a sum_{m: d_m <= L} p_m W(L - d_m) / P(L)   otherwise

    with P(L) = sum_{m: d_m <= L} p_m the share of tasks that fit the piece and
    a = min(1, P(L) / reach) the chance that one of them lands on it: pieces only rare
    kinds fit compete for few tasks. W(0) = 0."""
    one = target.num_gpus == 1
    fill = target.gpu_milli[one]
    share = target.share[one]
    waste = np.arange(MILLI_PER_GPU + 1, dtype=np.float64)
    if share.sum() <= 0:
        return waste
    p = share / share.sum()
    for left in range(1, MILLI_PER_GPU + 1):
        fits = fill <= left
        p_fit = float(p[fits].sum())
        if p_fit > 0:
            landed = min(1.0, p_fit / reach)
            then = float(p[fits] @ waste[left - fill[fits]]) / p_fit
            waste[left] = (1.0 - landed) * left + landed * then
    return waste


class FragmentationAwarePacker(FgdPacker):
    """FGD's score on ΔF_n(M) + ΔS_n of the learned mix, plus the look-ahead ΔW of
    the GPU a share takes (module docstring)."""

    name = "fragmentation-aware"

    def __init__(
        self,
        rng: np.random.Generator,
        target: TargetWorkload,
        node_order: IntArray | None = None,
    ) -> None:
        super().__init__(rng, target, node_order)
        self.mix = LearnedMix()
        self._waste: tuple[TargetWorkload, FloatArray] | None = None

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
        waste = self.piece_waste()
        left = np.clip(state.gpu_left_milli[nodes], 0, MILLI_PER_GPU)
        after = np.clip(left - task.gpu_milli, 0, MILLI_PER_GPU)
        ahead = LOOKAHEAD_WEIGHT * (waste[after] - waste[left])
        cost = np.nan_to_num(growth) + stranded[:, None] + ahead
        per_gpu = np.where(np.isnan(growth), -1, sigmoid_score(-cost))
        return per_gpu.max(axis=1), per_gpu.argmax(axis=1)

    def piece_waste(self) -> FloatArray:
        """W of the current mix, rebuilt when the mix is."""
        if self._waste is None or self._waste[0] is not self.target:
            self._waste = (self.target, piece_waste_milli(self.target))
        return self._waste[1]
