"""Gavel's space sharing (policies/gavel/packing.py, policies/gavel/colocation.py): the
packed allocations choose a pair where its rates beat time-sharing and not where they
do not, and a replay runs a chosen pair's jobs together at their pair rates
(controller/sim/speed.py, controller.rates.RateModel.pair_rate_ips)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from controller.actions import compile_plan
from controller.model import Cluster, JobSpec, Snapshot
from controller.model.gpus import GPU_CATALOG
from controller.model.perf.matrix import load_matrix
from controller.placement import make_placer
from controller.rates import RateModel
from controller.sim import SimConfig, Simulator
from policies.gavel import packing
from policies.registry import make_policy
from tests.builders import make_typed_cluster, make_view

RES18 = "('ResNet-18 (batch size 64)', 1)"
LM = "('LM (batch size 20)', 1)"
# Alone on one V100, A (ResNet-18) makes 1.2 steps/s and B (LM) 0.6; together, 1.0 and
# 0.5: each job 5/6 of its speed alone, well above the 1/2 that time-sharing gives.
GOOD_PAIR = {"v100": {RES18: {"null": 1.2, LM: [1.0, 0.5]}, LM: {"null": 0.6, RES18: [0.5, 1.0]}}}
ONE_GPU = np.array([1.0])
SOLO = np.array([[1.2], [0.6]])


def combos(own_a: float, own_b: float) -> packing.Combinations:
    return packing.Combinations(SOLO, np.ones(2), ((0, 1),), np.array([[[own_a, own_b]]]))


@pytest.mark.parametrize(
    ("pair", "packs"),
    [((1.0, 0.5), True), ((0.3, 0.1), False)],
)
def test_the_packed_lps_pair_two_jobs_only_where_the_pair_beats_time_sharing(
    pair: tuple[float, float], packs: bool
) -> None:
    c = combos(*pair)
    answers = [
        packing.max_min_fairness(c, np.ones(2), ONE_GPU),
        packing.min_makespan(c, ONE_GPU, np.array([400.0, 200.0])),
        packing.finish_time_fairness(c, ONE_GPU, np.zeros(2), np.array([400.0, 200.0])),
    ]
    for x in answers:
        if packs:
            assert x.pairs[0, 0] == pytest.approx(1.0, abs=1e-6)
            assert x.singles.sum() == pytest.approx(0.0, abs=1e-6)
        else:
            assert x.pairs[0, 0] == pytest.approx(0.0, abs=1e-6)
            # Time-sharing the one GPU: each job's time and the GPU's all used.
            assert x.singles.sum() == pytest.approx(1.0, abs=1e-6)
        # Each job's time, alone and paired, is at most 1; the GPU holds one combination.
        assert (x.singles[:, 0] + x.pairs[0, 0] <= 1.0 + 1e-9).all()
        assert x.singles.sum() + x.pairs.sum() <= 1.0 + 1e-9


def test_packed_las_is_fair_in_normalised_throughput() -> None:
    """LAS's pair gives each job 5/6 of its rate alone where time-sharing gives 1/2."""
    x = packing.max_min_fairness(combos(1.0, 0.5), np.ones(2), ONE_GPU)
    effective = x.singles[:, 0] * SOLO[:, 0] + x.pairs[0, 0] * np.array([1.0, 0.5])
    assert effective / SOLO[:, 0] == pytest.approx([5 / 6, 5 / 6], abs=1e-6)


@pytest.mark.parametrize(("pair", "packs"), [((1.0, 0.5), True), ((0.8, 0.2), False)])
def test_packed_fifo_pairs_the_queued_job_above_gavels_threshold(
    pair: tuple[float, float], packs: bool
) -> None:
    """Gavel's FIFO packs the queue's head with a running job where the pair's summed
    normalised throughput is above 1.5: 1.0/1.2 + 0.5/0.6 = 1.67 packs, 0.8/1.2 +
    0.2/0.6 = 1.0 does not."""
    x = packing.fifo(combos(*pair), ONE_GPU)
    if packs:
        assert x.pairs[0, 0] == 1.0 and not x.singles.any()
    else:
        assert x.singles[0, 0] == 1.0 and x.singles[1, 0] == 0.0 and not x.pairs.any()


def v100_server(tmp_path: Path, gpus: int) -> tuple[Cluster, RateModel]:
    """One V100 server of `gpus` GPUs, and its rates from GOOD_PAIR's matrix."""
    gpu = GPU_CATALOG.find("V100-SXM2-16GB")
    assert gpu is not None
    cluster = make_typed_cluster((gpu.gpu_type(), 1), gpus=gpus)
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(GOOD_PAIR))
    return cluster, RateModel(cluster, load_matrix(path))


def one_v100(tmp_path: Path) -> tuple[Cluster, list[JobSpec], RateModel]:
    """One V100 server of one GPU, jobs A and B at 0, and the rates of GOOD_PAIR."""
    cluster, rates = v100_server(tmp_path, 1)
    jobs = [
        JobSpec(
            job_id="a", submit_s=0.0, num_gpus=1, model="ResNet-18", batch_size=64, iterations=400.0
        ),
        JobSpec(job_id="b", submit_s=0.0, num_gpus=1, model="LM", batch_size=20, iterations=200.0),
    ]
    return cluster, jobs, rates


def replay(tmp_path: Path, **options: object) -> dict[str, float]:
    cluster, jobs, rates = one_v100(tmp_path)
    sim = Simulator(
        cluster,
        jobs,
        make_policy("gavel-las", **options),
        make_placer("consolidated", cluster, 0),
        SimConfig(round_interval_s=360.0, restart_s=0.0),
        rates=rates,
    )
    result = sim.run()
    finish = {j.job_id: j.finish_s for j in result.jobs}
    assert all(f is not None for f in finish.values())
    return {k: float(v) for k, v in finish.items() if v is not None}


def test_a_replay_runs_a_packed_pair_together_at_its_pair_rates(tmp_path: Path) -> None:
    """Packed, both jobs share the one GPU from 0 at their pair rates, 1.0 and 0.5
    steps/s: A's 400 steps and B's 200 both end at 400 s. Unpacked, they take turns
    on it a round each: LAS gives each half the GPU (equal to the solver's precision,
    so which goes first is the solver's), the first ends within the first round, alone
    (A at 400 / 1.2 s or B at 200 / 0.6 s), and the other runs alone from 360 s."""
    packed = replay(tmp_path, packed=True)
    assert packed == pytest.approx({"a": 400.0, "b": 400.0}, abs=1e-6)
    alone = replay(tmp_path)
    a_first = {"a": 400 / 1.2, "b": 360 + 200 / 0.6}
    b_first = {"a": 360 + 400 / 1.2, "b": 200 / 0.6}
    assert alone in (pytest.approx(a_first, rel=1e-9), pytest.approx(b_first, rel=1e-9))


def test_a_pair_shares_the_same_gpus_in_the_plan(tmp_path: Path) -> None:
    """The plan gives both jobs half of the same GPU: the shares both backends carry
    out as they do Gandiva's packs (controller.actions.compile_plan)."""
    cluster, jobs, rates = one_v100(tmp_path)
    views = tuple(make_view(j) for j in jobs)
    snapshot = Snapshot(
        0.0, cluster, views, make_placer("consolidated", cluster, 0), type_rates=rates
    )
    plan = make_policy("gavel-las", packed=True).schedule(snapshot, None)
    a, b = plan.run["a"], plan.run["b"]
    assert a.gpus() == b.gpus() == ((0, 0),)
    assert [s.fraction for s in a.shares + b.shares] == [0.5, 0.5]
    starts = {x.job_id: x.allocation for x in compile_plan(snapshot, plan)}
    assert starts == {"a": a, "b": b}


def test_packed_needs_the_aware_policy() -> None:
    with pytest.raises(ValueError, match="packed=true needs aware=true"):
        make_policy("gavel-las", packed=True, aware=False)


def test_pop_pairs_jobs_within_each_part(tmp_path: Path) -> None:
    """Split in two (POP, policies/gavel/pop.py), each part pairs its own jobs on its
    half of the GPUs: rows dealt round-robin put a with c and b with d."""
    cluster, rates = v100_server(tmp_path, 2)
    models = {"a": ("ResNet-18", 64), "b": ("LM", 20), "c": ("LM", 20), "d": ("ResNet-18", 64)}
    views = tuple(
        make_view(
            JobSpec(job_id=i, submit_s=0.0, num_gpus=1, model=m, batch_size=b, iterations=400.0)
        )
        for i, (m, b) in models.items()
    )
    snapshot = Snapshot(
        0.0,
        cluster,
        views,
        make_placer("consolidated", cluster, 0),
        type_rates=rates,
    )
    plan = make_policy("gavel-las", packed=True, pop_k=2).schedule(snapshot, None)
    assert set(plan.state.pairs) == {"a & c", "b & d"}
    assert plan.run["a"].gpus() == plan.run["c"].gpus() != plan.run["b"].gpus()
    assert plan.run["b"].gpus() == plan.run["d"].gpus()


@pytest.mark.parametrize("policy", ["gavel-las", "gavel-ftf", "gavel-makespan", "gavel-fifo"])
def test_a_packed_replay_keeps_every_plan_valid_and_finishes_every_job(
    tmp_path: Path, policy: str
) -> None:
    """Six jobs of the two job types on a server of two V100s, every plan checked
    (controller.actions.compile_plan): pairs form, break up as jobs end and never
    over-fill a GPU."""
    cluster, rates = v100_server(tmp_path, 2)
    jobs = [
        JobSpec(
            job_id=f"j{i}",
            submit_s=300.0 * (i // 3),
            num_gpus=1,
            model="ResNet-18" if i % 2 else "LM",
            batch_size=64 if i % 2 else 20,
            iterations=200.0 * (1 + i),
        )
        for i in range(6)
    ]
    sim = Simulator(
        cluster,
        jobs,
        make_policy(policy, packed=True),
        make_placer("consolidated", cluster, 0),
        SimConfig(round_interval_s=360.0, restart_s=0.0, check_plans=True),
        rates=rates,
    )
    result = sim.run()
    assert all(o.finish_s is not None for o in result.jobs)
    assert result.gpu_s_allocated <= result.gpu_s_capacity + 1e-6
    assert max(s.gpus_allocated for s in result.timeline) <= cluster.num_gpus + 1e-9
    # Some job ran paired (it held half a GPU for part of its run); not under the
    # makespan policy: the longest job (LM) runs slower paired than alone and bounds
    # the makespan, so its LP needs no pair here.
    paired = any(o.attained_gpu_s < o.executed_s - 1.0 for o in result.jobs)
    assert paired == (policy != "gavel-makespan")
