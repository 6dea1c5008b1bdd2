"""FGD's fragmentation measure over CPU and GPUs, vectorised over nodes.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC 2023), §4.1, as their simulator
computes it (hkust-adsl/kubernetes-scheduler-simulator, `utils.NodeGpuShareFragAmount`).
The target workload M is a set of task kinds m with popularity p_m (`TargetWorkload`).
For node n with unallocated GPU parts R_g (milli-GPUs), its fragment for m is

    F_n(m) = sum_g R_g                                 if m cannot run on n
           = sum_{g : R_g < d_m} R_g                    otherwise (eq. 1)

where "cannot run" means a CPU task (it uses no GPU, so every idle GPU is a fragment
to it), a GPU model m does not accept, too little CPU left (Fig. 4's Q4), or fewer than
k_m GPUs with at least d_m free (Q1, Q2); d_m is m's milli-GPU per GPU. The node's
fragmentation is F_n(M) = sum_m p_m F_n(m) (eq. 2), the cluster's the sum over nodes.
Called by the `fgd` placer (the gradient of one placement) and by the experiment
(the cluster's measure at each checkpoint). Host memory is not part of the measure,
as in FGD.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from experiments.packing.resources import MILLI_PER_GPU, TaskRequest
from experiments.packing.state import ClusterState, IntArray

FloatArray = npt.NDArray[np.float64]

# FGD's simulator keeps the most popular task kinds that make up 95 % of the tasks
# (generate_config_and_run.py: --pod-popularity-threshold 95, CPU tasks included).
POPULARITY_THRESHOLD = 0.95


@dataclass(frozen=True)
class TargetWorkload:
    """Task kinds (CPU, milli-GPU per GPU, GPUs, accepted models) and their shares."""

    cpu_milli: IntArray
    gpu_milli: IntArray
    num_gpus: IntArray
    models: tuple[frozenset[str], ...]
    share: FloatArray
    _access: dict[tuple[str, ...], npt.NDArray[np.bool_]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_tasks(
        cls, tasks: Iterable[TaskRequest], threshold: float = POPULARITY_THRESHOLD
    ) -> TargetWorkload:
        """The most popular kinds of `tasks`, most popular first, until they cover
        `threshold` of the tasks; their shares renormalised to sum to 1 (FGD's
        simulator, `utils.GetTypicalPods`, ties to the larger kind)."""
        return cls.from_counts(Counter(t.shape() for t in tasks), threshold)

    @classmethod
    def from_counts(
        cls, counts: Counter[tuple[int, int, int, str]], threshold: float = POPULARITY_THRESHOLD
    ) -> TargetWorkload:
        """`from_tasks` from the tasks counted by kind (`TaskRequest.shape`)."""
        if not counts:
            raise ValueError("a target workload needs at least one task")
        total = sum(counts.values())
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        kept: list[tuple[tuple[int, int, int, str], int]] = []
        covered = 0
        for kind, count in ranked:
            if covered >= threshold * total:
                break
            kept.append((kind, count))
            covered += count
        share = np.array([c / covered for _, c in kept])
        return cls(
            cpu_milli=np.array([k[0] for k, _ in kept], dtype=np.int64),
            gpu_milli=np.array([k[1] for k, _ in kept], dtype=np.int64),
            num_gpus=np.array([k[2] for k, _ in kept], dtype=np.int64),
            models=tuple(frozenset(filter(None, k[3].split("|"))) for k, _ in kept),
            share=share,
        )

    def __len__(self) -> int:
        return len(self.share)

    def access(self, state: ClusterState, nodes: IntArray) -> npt.NDArray[np.bool_]:
        """(nodes, kinds): whether each kind is a GPU kind the node's model accepts."""
        by_model = self._access.get(state.models)
        if by_model is None:
            by_model = np.array(
                [
                    [bool(g) and bool(m) and (not ms or m in ms) for g, ms in self._kinds()]
                    for m in state.models
                ],
                dtype=np.bool_,
            ).reshape(len(state.models), len(self))
            self._access[state.models] = by_model
        accepted: npt.NDArray[np.bool_] = by_model[state.model_index[nodes]]
        return accepted

    def _kinds(self) -> list[tuple[int, frozenset[str]]]:
        return list(zip(self.num_gpus.tolist(), self.models, strict=True))

    def gradient(self, state: ClusterState, nodes: IntArray, task: TaskRequest) -> FloatArray:
        """F_n(M) after minus before placing `task` on each of `nodes`: (nodes,) for a
        CPU task or whole GPUs, (nodes, GPUs) for a share (NaN where a GPU cannot
        hold it)."""
        left = state.gpu_left_milli[nodes]
        count, small = self._gpu_stats(left)
        total = left.sum(axis=1)[:, None]
        cpu = state.cpu_left[nodes][:, None]
        access = self.access(state, nodes)
        before = self._combine(cpu, count, small, total, access)
        if task.is_share:
            return self._after_share(left, count, small, total, cpu, access, task) - before[:, None]
        after = self._combine(
            cpu - task.cpu_milli,
            count - task.num_gpus,
            small,
            total - task.num_gpus * MILLI_PER_GPU,
            access,
        )
        return after - before

    def node_fragmentation(self, state: ClusterState, nodes: IntArray) -> FloatArray:
        """F_n(M) in milli-GPUs of each of `nodes`."""
        left = state.gpu_left_milli[nodes]
        count, small = self._gpu_stats(left)
        return self._combine(
            state.cpu_left[nodes][:, None],
            count,
            small,
            left.sum(axis=1)[:, None],
            self.access(state, nodes),
        )

    def _after_share(
        self,
        left: IntArray,
        count: IntArray,
        small: IntArray,
        total: IntArray,
        cpu: IntArray,
        access: npt.NDArray[np.bool_],
        task: TaskRequest,
    ) -> FloatArray:
        """(nodes, GPUs): F_n(M) once the share sits on each GPU. Only that GPU's free
        part changes, so each kind's count and small sum change by its term alone."""
        d = self.gpu_milli[None, None, :]
        before = left[:, :, None]
        after = before - task.gpu_milli
        count3 = count[:, None, :] - (before >= d) + (after >= d)
        small3 = small[:, None, :] - np.where(before < d, before, 0) + np.where(after < d, after, 0)
        frag = self._combine(
            cpu[:, :, None] - task.cpu_milli,
            count3,
            small3,
            total[:, :, None] - task.gpu_milli,
            access[:, None, :],
        )
        return np.where(left >= task.gpu_milli, frag, np.nan)

    def _gpu_stats(self, left: IntArray) -> tuple[IntArray, IntArray]:
        """(nodes, kinds): GPUs with at least d_m free, and the free parts of those below."""
        below = left[:, :, None] < self.gpu_milli[None, None, :]
        count = (~below).sum(axis=1)
        small = (left[:, :, None] * below).sum(axis=1)
        return count, small

    def _combine(
        self,
        cpu: IntArray,
        count: IntArray,
        small: IntArray,
        total: IntArray,
        access: npt.NDArray[np.bool_],
    ) -> FloatArray:
        runs = access & (cpu >= self.cpu_milli) & (count >= self.num_gpus)
        frag = np.where(runs, small, total)
        result: FloatArray = frag @ self.share
        return result


def cluster_fragmentation_milli(state: ClusterState, target: TargetWorkload) -> float:
    """The cluster's fragmentation sum_n F_n(M), in milli-GPUs."""
    nodes = np.arange(len(state.nodes))
    return float(target.node_fragmentation(state, nodes).sum())
