"""gpuflow's `fgd-cpu-aware` packer: FGD's fragmentation gradient plus the GPUs a
node's CPU can no longer feed, against the workload mix learned from the arrivals.

Published (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC 2023, §4.1 eq. 1-2 and §5 Alg. 1):
the node fragmentation F_n(M) = sum_m p_m F_n(m), its growth when a task is placed
(`experiments.packing.fragmentation.TargetWorkload.gradient`), and the score of their
simulator (`FGDScore`: sigmoid of the drop in GPUs x 100, truncated), ties to the
run's node order as for every packer of `experiments.packing.placers`.

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

- A look-ahead over the mix. FGD counts a GPU piece of L free milli-GPUs as
  L x P(d_m > L), the part of the mix it cannot hold now; a piece of 340 that the
  320-milli tasks (4 % of openb's) would fill weighs almost as much as one of 190
  that only the rare shares of at most 160 fit. W(L) (`piece_waste_milli`) is the
  idle the piece is expected to keep in the end: the mix's 1-GPU kinds keep
  arriving, one that fits lands on the piece with chance min(1, P(L) / 0.1)
  (`PIECE_REACH`), and W(L - d_m) follows. A kind lands only where the node's free
  CPU holds its ask, so a node with C free milli-cores reads W_C, built from the
  kinds asking at most C (`piece_waste_by_cpu`; a piece on a node with no core left
  keeps all of it), and the node's expected idle is V_n = sum_g W_{C_n}(R_g). A task
  goes where ΔF_n(M) + ΔS_n + 2 ΔV_n is least (`LOOKAHEAD_WEIGHT`). For a share
  ΔV_n is mostly its GPU's W(R_g - d) - W(R_g); a task that takes a node's last
  cores below what the kinds filling its pieces ask pays for the pieces it leaves
  idle, where FGD's step per kind nets out against the kinds that could not run
  there anyway. (First the look-ahead was for shares only and blind to CPU, W for
  every node: 1 gave 95.96 %, 2 95.99 % over seeds 42-51; the CPU-aware V_n:
  docs/placement.md.)

Host memory stays out of the score, as in FGD. Measured on openb (seeds 42, 43) and
left out: memory in F_n(M) (a kind lacking memory sees every idle GPU as fragment:
0.08 and 0.34 points below FGD), memory in S_n beside CPU (within 0.03 points of
CPU alone), S_n at 0.5, 1.5 or 2 x its weight (0.03-0.05 below) and S_n as a tie-break of FGD's
score only (0.03-0.05 below the sum); docs/placement.md has the figures.

Called by `experiments.packing.experiment` through `experiments.packing.registry`.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from experiments.packing.fragmentation import FloatArray, TargetWorkload
from experiments.packing.placers import FgdPacker, sigmoid_score
from experiments.packing.resources import MILLI_PER_GPU, TaskRequest
from experiments.packing.state import ClusterState, IntArray, Placement

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
# ΔV's weight beside ΔF_n(M) + ΔS_n, all in milli-GPUs: measured on openb, 10 seeds
# at 130 %, with the look-ahead for shares only: 1 gave 95.96 %, 2 95.99 %
# (docs/placement.md); kept at 2 with V_n.
LOOKAHEAD_WEIGHT = 2.0
# How often the look-ahead's table W_C is rebuilt once the mix has settled: a table
# (~30 CPU asks x 1,001 pieces on openb) costs what ~100 mix rebuilds cost, and the
# mix of a few thousand tasks moves little in 512 more.
WASTE_REFRESH_TASKS = 512


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
    kinds fit compete for few tasks. W(0) = 0. On a node with CPU enough for every
    kind: the last row of `piece_waste_by_cpu`."""
    waste: FloatArray = piece_waste_by_cpu(target, reach)[1][-1]
    return waste


def piece_waste_by_cpu(
    target: TargetWorkload, reach: float = PIECE_REACH
) -> tuple[IntArray, FloatArray]:
    """W of `piece_waste_milli` on a node with little CPU: the CPU asks c_1 < ... < c_K
    of the mix's 1-GPU kinds, and rows W_0 .. W_K (K + 1, 1001) where W_b lets land
    only the kinds asking at most c_b milli-cores (W_0: none, W_0(L) = L; W_K: every
    kind, `piece_waste_milli`). A node with C free milli-cores reads row
    b = #{k: c_k <= C} (`np.searchsorted(cpu, C, "right")`). The kinds that cannot
    land keep their part of the arrivals: a piece only they fit is reached less."""
    one = target.num_gpus == 1
    by_fill = np.argsort(target.gpu_milli[one], kind="stable")
    fill = target.gpu_milli[one][by_fill]
    cpu_ask = target.cpu_milli[one][by_fill]
    share = target.share[one][by_fill]
    cpu = np.unique(cpu_ask)
    waste = np.tile(np.arange(MILLI_PER_GPU + 1, dtype=np.float64), (cpu.size + 1, 1))
    if share.sum() <= 0:
        return cpu, waste
    # (rows, kinds): each kind's share of the arrivals where the row's CPU feeds it.
    fed = (share / share.sum())[None, :] * (cpu_ask[None, :] <= np.append(-1, cpu)[:, None])
    reached = np.cumsum(fed, axis=1)
    for left in range(int(fill[0]), MILLI_PER_GPU + 1):
        k = int(np.searchsorted(fill, left, side="right"))
        p_fit = reached[:, k - 1]
        then = np.einsum("ij,ij->i", fed[:, :k], waste[:, left - fill[:k]])
        landed = np.minimum(1.0, p_fit / reach)
        safe = np.where(p_fit > 0, p_fit, 1.0)
        waste[:, left] = np.where(p_fit > 0, (1.0 - landed) * left + landed * then / safe, left)
    return cpu, waste


def node_waste_growth(
    state: ClusterState,
    nodes: IntArray,
    task: TaskRequest,
    cpu: IntArray,
    waste: FloatArray,
) -> FloatArray:
    """ΔV_n, V_n = sum_g W_{b(C_n)}(R_g) (`piece_waste_by_cpu`): the growth of the idle
    the node's GPUs are expected to keep, its CPU deciding which kinds may land.
    (nodes,) for a CPU task or whole GPUs (taken from the node's free ones), (nodes,
    GPUs) for a share on each GPU (columns where it does not fit are meaningless)."""
    left = np.clip(state.gpu_left_milli[nodes], 0, MILLI_PER_GPU)
    free_cpu = state.cpu_left[nodes]
    row = np.searchsorted(cpu, free_cpu, side="right")[:, None]
    row_after = np.searchsorted(cpu, free_cpu - task.cpu_milli, side="right")[:, None]
    before = waste[row, left].sum(axis=1)
    after = waste[row_after, left].sum(axis=1)
    if task.is_share:
        taken = np.clip(left - task.gpu_milli, 0, MILLI_PER_GPU)
        moved = waste[row_after, taken] - waste[row_after, left]
        share_growth: FloatArray = (after - before)[:, None] + moved
        return share_growth
    whole = task.num_gpus * (waste[row_after[:, 0], MILLI_PER_GPU] - waste[row_after[:, 0], 0])
    growth: FloatArray = after - whole - before
    return growth


class CpuAwareFgdPacker(FgdPacker):
    """FGD's score on ΔF_n(M) + ΔS_n + 2 ΔV_n of the learned mix (module
    docstring)."""

    name = "fgd-cpu-aware"

    def __init__(
        self,
        rng: np.random.Generator,
        target: TargetWorkload,
        node_order: IntArray | None = None,
    ) -> None:
        super().__init__(rng, target, node_order)
        self.mix = LearnedMix()
        self._waste_cpu: tuple[int, IntArray, FloatArray] | None = None

    def place(self, state: ClusterState, task: TaskRequest) -> Placement | None:
        # Every task that asks counts in the mix, placed or not.
        self.target = self.mix.observe(task)
        return super().place(state, task)

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        growth = self.target.gradient(state, nodes, task)
        stranded = stranding_growth(state, nodes, task, cpu_per_gpu_milli(self.target))
        ahead = LOOKAHEAD_WEIGHT * node_waste_growth(state, nodes, task, *self.waste_by_cpu())
        if not task.is_share:
            return sigmoid_score(-(growth + stranded + ahead)), None
        # Scores are >= 0, so -1 marks the GPUs that cannot hold the share; S_n does
        # not depend on which GPU of the node takes it.
        cost = np.nan_to_num(growth) + stranded[:, None] + ahead
        per_gpu = np.where(np.isnan(growth), -1, sigmoid_score(-cost))
        return per_gpu.max(axis=1), per_gpu.argmax(axis=1)

    def waste_by_cpu(self) -> tuple[IntArray, FloatArray]:
        """`piece_waste_by_cpu` of the mix, rebuilt when the tasks seen have doubled
        or grown by `WASTE_REFRESH_TASKS` since the last build."""
        seen = self.mix.counts.total()
        if self._waste_cpu is None or seen >= min(
            2 * self._waste_cpu[0], self._waste_cpu[0] + WASTE_REFRESH_TASKS
        ):
            self._waste_cpu = (seen, *piece_waste_by_cpu(self.target))
        return self._waste_cpu[1], self._waste_cpu[2]
