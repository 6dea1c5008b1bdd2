"""Gavel's space sharing on a live cluster: the operator given a throughput matrix
(`gpuflow operator run --throughputs`) hands its pair rates to a packed Gavel policy,
and carries out a chosen pair as it does Gandiva's packs, both jobs' pods on the same
GPU (policies/gavel/colocation.py, operators/backend.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.model import JobStatus
from controller.model.perf.matrix import load_matrix
from gpuflow.operator_cmd import main as operator_main
from tests.operators.builders import make_dljob
from tests.operators.harness import running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.policies.test_gavel_packing import GOOD_PAIR
from tests.waiting import wait_for

# Ten 1-GPU jobs on the eight V100s of one DGX-1: time-sharing gives each 4/5 of its
# speed alone, a ResNet-18/LM pair 5/6 to both (GOOD_PAIR), so packed LAS pairs some.
MODELS = [("ResNet-18", 64), ("LM", 20)] * 5


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_the_operator_runs_a_packed_pair_on_one_gpu(
    gpu_cluster: RealCluster, tmp_path: Path
) -> None:
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(GOOD_PAIR))
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        names = [f"p{i}" for i in range(len(MODELS))]
        with running_operator(
            gpu_cluster.client,
            policy="gavel-las",
            policy_options=(("", "packed", True),),
            throughputs=load_matrix(path),
        ) as op:
            for name, (model, batch) in zip(names, MODELS, strict=True):
                body = make_dljob(name, 1, duration_s=600.0)
                body["spec"]["model"] = model
                body["spec"]["batchSize"] = batch
                api.create_dljob("default", body)

            def shared_gpus() -> dict[tuple[int, int], list[str]] | None:
                snapshot = op.backend.last_snapshot
                if snapshot is None:
                    return None
                on: dict[tuple[int, int], list[str]] = {}
                for job in snapshot.jobs:
                    if job.status is JobStatus.RUNNING and job.allocation is not None:
                        for s in job.allocation.shares:
                            if s.fraction < 1.0:
                                on.setdefault((s.node, s.gpu), []).append(job.job_id)
                return on or None

            pairs = wait_for("a pair running on one GPU", shared_gpus, 30)
            for jobs in pairs.values():
                # Two jobs a GPU, of the two job types the matrix measured together.
                assert len(jobs) == 2
                models = {api.get_dljob("default", j.split("/")[-1])["spec"]["model"] for j in jobs}
                assert models == {"ResNet-18", "LM"}
            wait_phases(api, "Running", [j.split("/")[-1] for js in pairs.values() for j in js])
    finally:
        kubelet.stop()


def test_a_bad_throughput_file_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert operator_main(["operator", "run", "--throughputs", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--throughputs" in err and "not a mapping" in err
