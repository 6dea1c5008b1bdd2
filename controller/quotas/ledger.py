"""What the queues got, round by round, and the per-queue report of a replay.

`QuotaLedger.record` is called by controller.quotas.admission.Quotas.settle after
each round (replays only); `QuotaLedger.report` is called by the replay command
(gpuflow/cli.py) once the replay ends, and controller.quotas.report writes its CSV
and plot.

A round's sample holds each leaf's GPUs after the plan, its deserved GPUs, and
whether it has demand: jobs of it still wait after the plan, asking together for at
least the GPUs it is short of its share (given them, it would fill its share; a
queue with one small job left waiting has no demand for its whole share). A sample
stands until the next one. Over the intervals where
every leaf has demand, a leaf's mean share is its time-averaged GPUs, and the queues'
fairness is Jain's index of the mean shares over the guarantees,
J = (sum x)^2 / (n sum x^2) with x = mean share / guarantee (controller.metrics'
jain_index), over the leaves with a guarantee (a leaf guaranteed nothing has no
share to be fair to).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.metrics import jain_index
from controller.model import Allocation, Reason
from controller.model.quotas import QuotaTree
from controller.model.quotas.room import EPS_GPUS
from controller.quotas.admitted import Admission
from controller.records import JobOutcome


@dataclass(frozen=True, slots=True)
class QuotaSample:
    """The leaves after one round: GPUs held, GPUs deserved, demand left waiting."""

    t_s: float
    held_gpus: tuple[float, ...]  # by leaf, in QuotaTree.leaves() order
    deserved_gpus: tuple[float, ...]
    backlogged: tuple[bool, ...]


class QuotaLedger:
    """Samples, reclaims and each job's leaf, kept over a replay."""

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self.leaves = [leaf.name for leaf in tree.leaves()]
        self.samples: list[QuotaSample] = []
        self.reclaims = dict.fromkeys(self.leaves, 0)
        self.job_leaf: dict[str, str] = {}

    def record(
        self, adm: Admission, run: Mapping[str, Allocation], victims: Mapping[str, Reason]
    ) -> None:
        held = dict.fromkeys(self.leaves, 0.0)
        asked = dict.fromkeys(self.leaves, 0.0)
        for job in adm.snapshot.jobs:
            name = adm.leaf.get(job.job_id)
            if name is None:
                continue
            self.job_leaf.setdefault(job.job_id, name)
            alloc = run.get(job.job_id)
            if alloc is None or job.job_id in victims:
                asked[name] += job.spec.num_gpus
            else:
                held[name] += alloc.gpu_weight
        deserved = {n: adm.deserved(n) for n in self.leaves}
        short = {n: deserved[n] - held[n] for n in self.leaves}
        waiting = {n for n in self.leaves if asked[n] > 0 and asked[n] + EPS_GPUS >= short[n]}
        for job_id in victims:
            name = adm.leaf[job_id]
            if name is not None:
                self.reclaims[name] += 1
        sample = QuotaSample(
            adm.snapshot.now_s,
            tuple(held[n] for n in self.leaves),
            tuple(deserved[n] for n in self.leaves),
            tuple(n in waiting for n in self.leaves),
        )
        if self.samples and self.samples[-1].t_s == sample.t_s:
            self.samples[-1] = sample  # a second round at the same instant decides
        else:
            self.samples.append(sample)

    def contended(self, end_s: float) -> list[tuple[QuotaSample, float]]:
        """(sample, its duration) for the samples where every leaf has demand."""
        out: list[tuple[QuotaSample, float]] = []
        for i, sample in enumerate(self.samples):
            until = self.samples[i + 1].t_s if i + 1 < len(self.samples) else end_s
            if until > sample.t_s and all(sample.backlogged):
                out.append((sample, until - sample.t_s))
        return out

    def mean_over_contended(self, end_s: float) -> tuple[list[float], list[float]] | None:
        """(mean held, mean deserved) GPUs by leaf over the contended intervals."""
        spans = self.contended(end_s)
        total = sum(d for _, d in spans)
        if total <= 0:
            return None
        held = [sum(s.held_gpus[k] * d for s, d in spans) / total for k in range(len(self.leaves))]
        due = [
            sum(s.deserved_gpus[k] * d for s, d in spans) / total for k in range(len(self.leaves))
        ]
        return held, due

    def report(self, outcomes: Sequence[JobOutcome], end_s: float) -> dict[str, object]:
        """The replay's `queues` and `queue_fairness_jain` (JSON-ready)."""
        means = self.mean_over_contended(end_s)
        jcts: dict[str, list[float]] = {n: [] for n in self.leaves}
        for outcome in outcomes:
            name = self.job_leaf.get(outcome.job_id)
            if name is not None and outcome.jct_s is not None:
                jcts[name].append(outcome.jct_s)
        queues: dict[str, dict[str, float | int | None]] = {}
        ratios: list[float] = []
        for k, name in enumerate(self.leaves):
            node = self.tree.node(name)
            assert node is not None
            share = None if means is None else means[0][k]
            queues[name] = {
                "guarantee_gpus": node.guarantee.total,
                "mean_share_gpus": share,
                "avg_jct_s": sum(jcts[name]) / len(jcts[name]) if jcts[name] else None,
                "reclaims": self.reclaims[name],
            }
            if share is not None and node.guarantee.total > 0:
                ratios.append(share / node.guarantee.total)
        return {"queues": queues, "queue_fairness_jain": jain_index(ratios)}

    def ftf_rho(self, rhos: Mapping[str, float]) -> dict[str, dict[str, float | None]]:
        """Each leaf's mean and largest finish-time fairness rho (Themis: JCT over the
        job's time alone on its 1/N share), from controller.metrics' rho per job."""
        by_leaf: dict[str, list[float]] = {n: [] for n in self.leaves}
        for job_id, rho in rhos.items():
            name = self.job_leaf.get(job_id)
            if name is not None:
                by_leaf[name].append(rho)
        return {
            n: {
                "mean": sum(v) / len(v) if v else None,
                "max": max(v) if v else None,
            }
            for n, v in by_leaf.items()
        }
