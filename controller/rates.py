"""Job speeds for the simulator and the operator's views: the performance model
behind a cache.

The simulator asks for a job's iterations per second on an allocation many times
with the same answer; this memoises `controller.model.perf` by the allocation's
shape (not its GPU ids) and the job's precision, which is what the iteration time
depends on, and a job's speed alone on its GPUs by its model, precision, GPUs and
batch as well (one lookup for each start of a time-sliced job). A model's speed on a
GPU type is measured where controller.model.perf.throughputs has a rate, else the GPU's
scalar speed (controller.model.perf.gpu_speed): the replay and the live views read
both through this one class. Given a throughput matrix (controller.model.perf.matrix,
`--throughputs FILE`), a job whose type it has runs at its rate there on GPUs it holds
whole, the performance model's speed otherwise (a network allocator's rate, shared
GPUs), except two jobs that share the same GPUs of one server where the matrix has
their pair: each runs at its pair rate there (`pair_rate_ips`, Gavel's space sharing;
controller.sim.speed asks it), the H200 sharing model (controller.model.sharing) being
for the rest. `type_rate_ips` is a job's speed on each GPU type, and `type_pair_ips`
two jobs' pair rates on one, which the snapshot hands the Gavel policies
(`Snapshot.type_rates`).
"""

from __future__ import annotations

from dataclasses import replace

from controller.model import Allocation, Cluster, GpuShare, JobSpec
from controller.model.catalog import ModelProfile, gpu_util_of, resolve
from controller.model.perf import (
    PlacementSignature,
    packed_gpu_signature,
    restart_s,
    throughput_ips,
)
from controller.model.perf.matrix import ThroughputMatrix, type_allocation
from controller.model.perf.work import work_batch, work_per_step
from controller.model.precision import Precision
from controller.placement import packed_allocation

# Points over a job's run at which its statistical gain is averaged for its nominal
# speed: the gain follows the measured runs' epochs (at most 100 rows), and 50 points
# keep the mean within a percent of a finer grid for the six measured applications.
NOMINAL_GAIN_POINTS = 50

# Placements whose signature is kept (and solo speeds by model, GPUs and batch): a
# replay's placers reuse GPU sets (1,294 distinct ones in the first 3,000 stand-in
# jobs of bench/replay.py --at-load on 32x8 under Tiresias), and past this many the
# cache starts afresh rather than grow with every placement of a large cluster.
SIGNATURES_KEPT = 1 << 16


class RateModel:
    def __init__(self, cluster: Cluster, matrix: ThroughputMatrix | None = None) -> None:
        self.cluster = cluster
        self.matrix = matrix
        # (model, batch, GPU type, GPUs) -> speed on an empty cluster (type_rate_ips).
        self._types: dict[tuple[str, int | None, str, int], float | None] = {}
        # (model, batch, partner's model, batch, GPU type, GPUs) -> the matrix's pair rates.
        self._pairs: dict[
            tuple[str, int | None, str, int | None, str, int], tuple[float, float] | None
        ] = {}
        self._rates: dict[tuple[object, ...], float] = {}
        # (model, precision, own utilisation, GPU shares, batch) -> the speed alone on
        # them, no network allocator (an MPS share caps a job by its utilisation).
        self._solo: dict[
            tuple[str, Precision, float | None, tuple[GpuShare, ...], int | None], float
        ] = {}
        self._nominal: dict[
            tuple[str, Precision, float | None, int, int | None, int | None], float
        ] = {}
        self._profiles: dict[tuple[str, float | None], ModelProfile] = {}
        # GPU shares -> signature: re-rating a job recomputed its placement's
        # signature at each start and each neighbour change; a tuple of shares
        # hashes and compares in C.
        self._signatures: dict[tuple[GpuShare, ...], PlacementSignature] = {}

    def profile(self, spec: JobSpec) -> ModelProfile:
        """The job's model profile, with the job's own utilisation where it has one
        (`JobSpec.gpu_util`), which the sharing model slows it by."""
        key = (spec.model, spec.gpu_util)
        prof = self._profiles.get(key)
        if prof is None:
            prof = resolve(spec.model)
            if spec.gpu_util is not None:
                prof = replace(prof, gpu_util=spec.gpu_util)
            self._profiles[key] = prof
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
        batch = batch_size if batch_size is not None else spec.batch_size
        if inter_node_gbps is None and gpu_load == 0.0:
            # A job alone on its GPUs (each start of a time-sliced job): one lookup by
            # what the speed depends on, before the signature and the profile.
            solo_key = (spec.model, spec.precision, spec.gpu_util, alloc.shares, batch)
            rate = self._solo.get(solo_key)
            if rate is None:
                if len(self._solo) >= SIGNATURES_KEPT:
                    self._solo.clear()
                rate = self._solo[solo_key] = self._rate_ips(spec, alloc, batch, 0.0, None)
            return rate
        return self._rate_ips(spec, alloc, batch, gpu_load, inter_node_gbps)

    def _rate_ips(
        self,
        spec: JobSpec,
        alloc: Allocation,
        batch: int | None,
        gpu_load: float,
        inter_node_gbps: float | None,
    ) -> float:
        prof = self.profile(spec)
        if inter_node_gbps is not None:
            return throughput_ips(
                prof,
                self.cluster,
                alloc,
                batch_size=batch,
                inter_node_gbps=inter_node_gbps,
                gpu_load=gpu_load,
                precision=spec.precision,
            )
        signature = self._signatures.get(alloc.shares)
        if signature is None:
            if len(self._signatures) >= SIGNATURES_KEPT:
                self._signatures.clear()
            signature = packed_gpu_signature(self.cluster, alloc)
            self._signatures[alloc.shares] = signature
        key = (prof.name, spec.precision, prof.gpu_util, signature, batch, round(gpu_load, 6))
        if self.matrix is not None and gpu_load == 0.0 and signature.min_fraction == 1.0:
            # Keyed by the model as written: two Gavel job types may share a profile.
            matrix_key = (spec.model, spec.batch_size, signature)
            rate = self._rates.get(matrix_key)
            if rate is None:
                rate = self._matrix_rate(spec, alloc, signature)
                if rate is not None:
                    self._rates[matrix_key] = rate
            if rate is not None:
                return rate
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = throughput_ips(
                prof,
                self.cluster,
                alloc,
                batch_size=batch,
                gpu_load=gpu_load,
                precision=spec.precision,
            )
        return rate

    def _matrix_rate(
        self, spec: JobSpec, alloc: Allocation, signature: PlacementSignature
    ) -> float | None:
        """The matrix's rate for the job on whole GPUs (module docstring), or None."""
        assert self.matrix is not None
        gpus = [t.name for t in signature.gpu_types]
        consolidated = len(signature.nodes) == 1
        return self.matrix.rate_ips(spec, gpus, alloc.num_gpus, consolidated=consolidated)

    def type_rate_ips(self, spec: JobSpec, gpu: str, num_gpus: int) -> float | None:
        """Steps per second of the job on `num_gpus` GPUs of type `gpu`, on one server
        where one has them (controller.model.perf.matrix.type_allocation), at its own batch;
        None where the cluster has too few of the type (`Snapshot.type_rates`)."""
        key = (spec.model, spec.batch_size, gpu, num_gpus)
        if key not in self._types:
            alloc = type_allocation(self.cluster, gpu, num_gpus)
            self._types[key] = None if alloc is None else self.rate_ips(spec, alloc)
        return self._types[key]

    def type_pair_ips(
        self, spec: JobSpec, other: JobSpec, gpu: str, num_gpus: int
    ) -> tuple[float, float] | None:
        """Steps per second of `spec` and of `other` sharing `num_gpus` GPUs of type
        `gpu`: the matrix's pair entry (Gavel's space sharing), or None where there is
        no matrix, either job has no row in it, or the pair was not measured."""
        if self.matrix is None:
            return None
        key = (spec.model, spec.batch_size, other.model, other.batch_size, gpu, num_gpus)
        if key not in self._pairs:
            own = self.matrix.job_type(spec.model, spec.batch_size)
            theirs = self.matrix.job_type(other.model, other.batch_size)
            self._pairs[key] = (
                None
                if own is None or theirs is None
                else self.matrix.pair_ips(own, theirs, gpu, num_gpus)
            )
        return self._pairs[key]

    def pair_rate_ips(self, spec: JobSpec, alloc: Allocation, other: JobSpec) -> float | None:
        """Steps per second of `spec` on `alloc` beside `other` on the same GPUs: its
        pair rate in the matrix where the GPUs are of one type on one server (Gavel
        measured pairs consolidated), else None (the sharing model's speed applies)."""
        if self.matrix is None or len(alloc.nodes) != 1:
            return None
        gpu = self.cluster.nodes[alloc.nodes[0]].gpu_type.name
        rates = self.type_pair_ips(spec, other, gpu, alloc.num_gpus)
        return None if rates is None else rates[0]

    def nominal_rate_ips(self, spec: JobSpec) -> float:
        """Work per second on the GPUs asked for, at the job's own batch, placed as well
        as the empty cluster allows. Where the job's batch is not its work batch, the
        speed is divided by the mean over its run of 1 / gain (the time to do the work
        at a constant step rate), so that `duration_s` and oracle remaining times are
        in the units of the work."""
        key = (
            spec.model,
            spec.precision,
            spec.gpu_util,
            spec.num_gpus,
            spec.batch_size,
            spec.work_batch,
        )
        rate = self._nominal.get(key)
        if rate is None:
            alloc = packed_allocation(self.cluster, spec.num_gpus)
            if alloc is None:
                raise ValueError(f"job {spec.job_id}: {spec.num_gpus} GPUs exceed the cluster")
            rate = self.rate_ips(spec, alloc)
            if spec.batch_size is not None and spec.batch_size != self.reference_batch(spec):
                steps = [i / NOMINAL_GAIN_POINTS for i in range(NOMINAL_GAIN_POINTS)]
                inverse = [1.0 / self.goodput_factor(spec, spec.batch_size, p) for p in steps]
                rate *= len(inverse) / sum(inverse)
            self._nominal[key] = rate
        return rate

    def reference_batch(self, spec: JobSpec) -> int:
        """The batch size the job's work is counted in (`controller.model.perf.work`)."""
        return work_batch(spec)

    def goodput_factor(self, spec: JobSpec, batch_size: int | None, progress: float) -> float:
        """Work-batch iterations per iteration at `batch_size`, at `progress` (0..1):
        `controller.model.perf.work.work_per_step`."""
        return work_per_step(spec, batch_size, progress)

    def work_rate_ips(
        self, spec: JobSpec, rate_ips: float, batch_size: int | None, progress: float
    ) -> float:
        """A speed in iterations at `batch_size` as the work-batch iterations per second
        that progress is counted in, at `progress` (0..1): the simulator's running jobs
        (controller.sim.speed) and the operator's views (operators/views.py) alike."""
        if batch_size is None or batch_size == self.reference_batch(spec):
            return rate_ips
        return rate_ips * self.goodput_factor(spec, batch_size, progress)

    def utilization(self, spec: JobSpec) -> float:
        """How busy the job keeps a GPU alone (0..1), for packing interference."""
        return gpu_util_of(spec)

    def restart_s(self, spec: JobSpec) -> float:
        return restart_s(self.profile(spec))
