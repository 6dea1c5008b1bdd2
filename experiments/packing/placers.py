"""FGD's placers by their names: random, best-fit, dot-product, gpu-packing,
gpu-clustering and fgd, over CPU, memory, GPU model and milli-GPUs.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC 2023): §5 (FGD) and §6.1 (the
baselines), as their simulator implements them (hkust-adsl/kubernetes-scheduler-
simulator, `pkg/simulator/plugin/*_score.go`, run as in
`experiments/run_scripts/generate_run_scripts.py`). Each placement is one
kube-scheduler cycle: the filter (`ClusterState.fits`), one integer score in 0..100
per feasible node, the first node of highest score in the run's node order, then
the GPUs on it (open-gpu-share's Reserve: `best` fit unless the placer chooses).

Ties: the simulator names its nodes with a random permutation prefix, and its
kube-scheduler (the fork mental2008/kubernetes v1.20.5-minor, not public in our
sources) evidently takes the first best node in that order: with ties drawn
uniformly (stock kube-scheduler's `selectHost`) GPU packing, GPU clustering and FGD
land 3-5 points below their published means; with the first node of a random order
fixed per run (`node_order`, drawn by the experiment) each comes within 0.1
points over 10 seeds. So ties follow `node_order` (the lowest node index without one).
Scores are the simulator's integers, truncations included: they decide which
nodes tie. Constants: `MAX_SPEC_CPU_MILLI`, `MAX_SPEC_GPU_MILLI`
(open-gpu-share `utils/const.go`: the largest node's CPU and GPUs).

Called by `experiments.packing.experiment` through `experiments.packing.registry`;
every placer keeps no state between calls but its random generator (the cluster's
state, including the GPU tasks per node that GPU clustering reads, is `ClusterState`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from experiments.packing.fragmentation import FloatArray, TargetWorkload
from experiments.packing.resources import MILLI_PER_GPU, TaskRequest
from experiments.packing.state import ClusterState, IntArray, Placement, gpu_task_kind

MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000
MAX_SCORE = 100


class Packer:
    """Filter, score, pick among the best at random, choose GPUs (module docstring)."""

    name = ""

    def __init__(
        self,
        rng: np.random.Generator,
        target: TargetWorkload,
        node_order: IntArray | None = None,
    ) -> None:
        self.rng = rng
        self.target = target
        self.node_order = node_order

    def place(self, state: ClusterState, task: TaskRequest) -> Placement | None:
        """Where `task` goes, or None when no node can hold it (the task fails)."""
        nodes = np.flatnonzero(state.fits(task))
        if nodes.size == 0:
            return None
        scores, gpus = self.scores(state, task, nodes)
        best = np.flatnonzero(scores == scores.max())
        if best.size > 1 and self.node_order is not None:
            best = best[np.argmin(self.node_order[nodes[best]])]
        pick = int(np.atleast_1d(best)[0])
        node = int(nodes[pick])
        if gpus is not None and task.is_share:
            return Placement(node, (int(gpus[pick]),))
        return Placement(node, self.gpus(state, task, node))

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        """Integer scores of the feasible `nodes`, and the GPU each would give a share
        (None: chosen by `gpus`)."""
        raise NotImplementedError

    def gpus(self, state: ClusterState, task: TaskRequest, node: int) -> tuple[int, ...]:
        """The GPUs on `node`: best fit (open-gpu-share `allocateGpuIdBasedOnBestFit`):
        a share on the fitting GPU with the least left (lowest index among equals);
        whole GPUs on the lowest-numbered free ones."""
        if task.num_gpus == 0:
            return ()
        if task.is_share:
            left = state.gpu_left_milli[node]
            fitting = np.where(left >= task.gpu_milli, left, MILLI_PER_GPU + 1)
            return (int(np.argmin(fitting)),)
        return state.free_gpus(node)[: task.num_gpus]


class RandomPacker(Packer):
    """Random (§6.1): a feasible node uniformly at random (`RandomScore`), a share on a
    fitting GPU uniformly at random (`allocateGpuIdBasedOnRandomFit`)."""

    name = "random"

    def place(self, state: ClusterState, task: TaskRequest) -> Placement | None:
        # RandomScore gives the maximum to one node drawn uniformly (its PreScore), so
        # the node order that breaks other placers' ties plays no part.
        nodes = np.flatnonzero(state.fits(task))
        if nodes.size == 0:
            return None
        node = int(nodes[self.rng.integers(nodes.size)])
        return Placement(node, self.gpus(state, task, node))

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        return np.zeros(nodes.size, dtype=np.int64), None

    def gpus(self, state: ClusterState, task: TaskRequest, node: int) -> tuple[int, ...]:
        if not task.is_share:
            return super().gpus(state, task, node)
        fitting = np.flatnonzero(state.gpu_left_milli[node] >= task.gpu_milli)
        return (int(fitting[self.rng.integers(fitting.size)]),)


class BestFitPacker(Packer):
    """Best-fit (§6.1; Kubernetes' MostAllocated in spirit): the node with the least
    free resources left after placing, Σ_i w_i (free_i - request_i) / max_i over CPU
    and GPU with weights 1/2 each (`BestFitScore`), scored (1 - that) x 100."""

    name = "best-fit"

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        cpu = (state.cpu_left[nodes] - task.cpu_milli) / MAX_SPEC_CPU_MILLI
        gpu = (state.gpu_left_milli[nodes].sum(axis=1) - task.total_gpu_milli) / MAX_SPEC_GPU_MILLI
        return _truncate((1.0 - (0.5 * cpu + 0.5 * gpu)) * MAX_SCORE), None


class DotProductPacker(Packer):
    """Dot-product (§6.1, after Tetris, Grandl et al. SIGCOMM 2014): the dot product
    of the node's free (CPU, GPU) and the task's request, each normalised by the
    largest node; FGD's simulator (`DotProductScore`, dimExt "merge", norm "max")
    favours the node where it is *smallest*, scored (1 - dot / 2) x 100."""

    name = "dot-product"

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        cpu = state.cpu_left[nodes] / MAX_SPEC_CPU_MILLI * (task.cpu_milli / MAX_SPEC_CPU_MILLI)
        gpu_free = state.gpu_left_milli[nodes].sum(axis=1) / MAX_SPEC_GPU_MILLI
        dot = cpu + gpu_free * (task.total_gpu_milli / MAX_SPEC_GPU_MILLI)
        return _truncate((1.0 - dot / 2.0) * MAX_SCORE), None


class GpuPackingPacker(Packer):
    """GPU packing (§6.1, `GpuPackingScore`): first a GPU already shared (score
    100 - a tenth of its free percent, at least 50), then free GPUs of a node in use
    (50 - GPUs taken, at least 33), last an idle node (33 - its GPUs, at least its
    GPUs): fill used GPUs, then used nodes, before opening a new one. CPU tasks score 0
    everywhere (a random feasible node)."""

    name = "gpu-packing"

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        if task.num_gpus == 0:
            return np.zeros(nodes.size, dtype=np.int64), None
        left = state.gpu_left_milli[nodes]
        count = state.gpu_count[nodes]
        full = (left == MILLI_PER_GPU).sum(axis=1)
        idle = np.maximum(MAX_SCORE // 3 - full, full)
        if task.is_share:
            tight = np.where(left >= task.gpu_milli, left, MILLI_PER_GPU + 1).min(axis=1)
            on_shared = np.maximum(MAX_SCORE - (tight * 100 // MILLI_PER_GPU) // 10, MAX_SCORE // 2)
            used = np.where(
                tight == MILLI_PER_GPU, max(MAX_SCORE // 2 - 1, MAX_SCORE // 3), on_shared
            )
        else:
            used = np.full(nodes.size, max(MAX_SCORE // 2 - task.num_gpus, MAX_SCORE // 3))
        return np.where(full == count, idle, used).astype(np.int64), None


class GpuClusteringPacker(Packer):
    """GPU clustering (§6.1, `GpuClusteringScore`): keep tasks of one kind (a share,
    or k whole GPUs) together: a node holding only that kind scores 75-100, a node
    holding it among others 50-75, an idle node 25-50, a node of other kinds 0-25;
    within a band, the fewer free GPUs the higher. CPU tasks score 0 everywhere."""

    name = "gpu-clustering"

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        if task.num_gpus == 0:
            return np.zeros(nodes.size, dtype=np.int64), None
        quarter = MAX_SCORE // 4
        left = state.gpu_left_milli[nodes].sum(axis=1)
        base = quarter * (MAX_SPEC_GPU_MILLI - left) // MAX_SPEC_GPU_MILLI
        kinds = state.gpu_tasks[nodes]
        present = kinds > 0
        same = present[:, gpu_task_kind(task)]
        n_kinds = present.sum(axis=1)
        band = np.where(
            same,
            np.where(n_kinds == 1, 3 * quarter, 2 * quarter),
            np.where(n_kinds == 0, quarter, 0),
        )
        return (base + band).astype(np.int64), None


class FgdPacker(Packer):
    """FGD (§5, Algorithm 1): the node and GPU where the node's fragmentation
    F_n(M) (`experiments.packing.fragmentation`) grows least. Score as the simulator's
    `FGDScore`: sigmoid((F_before - F_after) / 1000) x 100, truncated; a share goes
    on the node's GPU of highest score (lowest index among equals), whole GPUs on
    the lowest-numbered free ones."""

    name = "fgd"

    def scores(
        self, state: ClusterState, task: TaskRequest, nodes: IntArray
    ) -> tuple[IntArray, IntArray | None]:
        growth = self.target.gradient(state, nodes, task)
        if not task.is_share:
            return sigmoid_score(-growth), None
        # Scores are >= 0, so -1 marks the GPUs that cannot hold the share.
        per_gpu = np.where(np.isnan(growth), -1, sigmoid_score(-np.nan_to_num(growth)))
        return per_gpu.max(axis=1), per_gpu.argmax(axis=1)


def _truncate(values: FloatArray) -> IntArray:
    """Go's int64(x): toward zero."""
    return np.trunc(values).astype(np.int64)


def sigmoid_score(drop_milli: npt.NDArray[np.float64]) -> IntArray:
    return _truncate(MAX_SCORE / (1.0 + np.exp(-drop_milli / MILLI_PER_GPU)))


PackerFactory = Callable[[np.random.Generator, TargetWorkload, IntArray | None], Packer]

# FGD's placers by name; with gpuflow's own in `experiments.packing.registry.PACKERS`.
FGD_PACKERS: dict[str, PackerFactory] = {
    cls.name: cls
    for cls in (
        RandomPacker,
        BestFitPacker,
        DotProductPacker,
        GpuPackingPacker,
        GpuClusteringPacker,
        FgdPacker,
    )
}
