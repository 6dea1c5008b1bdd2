"""Job speeds for the simulator: the performance model behind a cache.

The simulator asks for a job's iterations per second on an allocation many times
with the same answer; this memoises `controller.model.perf` by the allocation's
shape (not its GPU ids), which is what the iteration time depends on.
"""

from __future__ import annotations

import math

from controller.model import Allocation, Cluster, JobSpec
from controller.model.catalog import ModelProfile, measured_profile, resolve
from controller.model.perf import packed_gpu_signature, restart_s, throughput_ips
from controller.placement import packed_allocation


class RateModel:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._rates: dict[tuple[object, ...], float] = {}
        self._nominal: dict[tuple[str, int, int | None], float] = {}
        self._profiles: dict[str, ModelProfile] = {}

    def profile(self, spec: JobSpec) -> ModelProfile:
        prof = self._profiles.get(spec.model)
        if prof is None:
            prof = self._profiles[spec.model] = resolve(spec.model)
        return prof

    def rate_ips(
        self,
        spec: JobSpec,
        alloc: Allocation,
        *,
        batch_size: int | None = None,
        gpu_load: float = 0.0,
        inter_node_gbps: float | None = None,
    ) -> float:
        """Iterations per second of `spec` on `alloc`; `inter_node_gbps` is the rate a
        network allocator gives the job between its nodes (default: its links alone).
        Allocated rates vary continuously, so those speeds are not memoised."""
        prof = self.profile(spec)
        batch = batch_size if batch_size is not None else spec.batch_size
        if inter_node_gbps is not None:
            return throughput_ips(
                prof,
                self.cluster,
                alloc,
                batch_size=batch,
                inter_node_gbps=inter_node_gbps,
                gpu_load=gpu_load,
            )
        key = (
            prof.name,
            packed_gpu_signature(self.cluster, alloc),
            batch,
            round(gpu_load, 6),
        )
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = throughput_ips(
                prof,
                self.cluster,
                alloc,
                batch_size=batch,
                gpu_load=gpu_load,
            )
        return rate

    def nominal_rate_ips(self, spec: JobSpec) -> float:
        """Speed on the GPUs asked for, placed as well as the empty cluster allows."""
        key = (spec.model, spec.num_gpus, spec.batch_size)
        rate = self._nominal.get(key)
        if rate is None:
            alloc = packed_allocation(self.cluster, spec.num_gpus)
            if alloc is None:
                raise ValueError(f"job {spec.job_id}: {spec.num_gpus} GPUs exceed the cluster")
            rate = self._nominal[key] = self.rate_ips(spec, alloc)
        return rate

    def reference_batch(self, spec: JobSpec) -> int:
        """The batch size the job's work is counted in (its own, else the profile's)."""
        return spec.batch_size if spec.batch_size is not None else self.profile(spec).batch_size

    def goodput_factor(self, spec: JobSpec, batch_size: int | None, progress: float) -> float:
        """Reference-batch iterations per iteration at `batch_size`.

        Pollux (Qiao et al., OSDI 2021, §3.1): a step at batch M is worth
        (M / M0) x E(M) steps at the reference batch M0, with statistical efficiency
        E(M) = (phi + M0) / (phi + M) and phi the gradient noise scale. With the
        measured ratio r = grad_var / grad_sqr at batch M0 (AdaptDL's goodput model,
        phi = M0 r) and s = M / M0 this is s (r + 1) / (r + s). Models without measured
        gradient statistics are taken as perfectly efficient (factor s), so only a
        policy that changes batch sizes ever sees the difference.
        """
        ref = self.reference_batch(spec)
        if batch_size is None or batch_size == ref:
            return 1.0
        scale = batch_size / ref
        measured = measured_profile(self.profile(spec).measured or "")
        if measured is None:
            return scale
        ratio = measured.noise_scale_at(progress * measured.max_progress, ref)
        if not math.isfinite(ratio):
            # A measured squared gradient norm of zero (deepspeech2 late in training):
            # noise dominates, every sample counts, as the limit r -> inf gives.
            return scale
        return scale * (ratio + 1.0) / (ratio + scale)

    def utilization(self, spec: JobSpec) -> float:
        """How busy the job keeps a GPU alone (0..1), for packing interference."""
        return self.profile(spec).gpu_util

    def restart_s(self, spec: JobSpec) -> float:
        return restart_s(self.profile(spec))
