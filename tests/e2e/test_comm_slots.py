"""CASSINI live: the operator's comm slots interleave two jobs on shaped NICs (issue 19).

The sandbox as root (gpuflow/sandbox: a network namespace per node and per pod, each
node's agent shaping its eth0 with HTB) runs the operator with `--network cassini`.
Two 2-rank DLJobs (model ncf) each get one GPU on node-0 and one on node-1 (the
placeholder trick of test_bandwidth.py), so both rings cross both NICs. The operator
publishes on their pods the same slot period, offsets half a period apart, and HTB
classes that borrow (ceiling the whole NIC, floor half); the agents apply them.

The workers are synthetic jobs sized to the published slot (the model's ncf iteration
is dominated by its transfer at these rates, so a real ncf step would not show the
effect): each iteration is a compute phase (a sleep of COMPUTE_SHARE of the period)
then a gloo all-reduce whose transfer alone takes TRANSFER_SHARE of the period at the
NIC, held to the job's slot by gpuflow.train.commslot. Alone such a job fits in one
period; two of them in phase under fair sharing take compute + two transfers, which
the phase model (validated against real traffic in test_phases.py) puts at 1.35
periods. Held to their slots they must iterate at the period (within the issue's
10 %), their transfers barely overlap, and they beat the fair in-phase pair.

Root only; about a minute and a half.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from controller.network.phases import shared_link_iteration_s
from gpuflow.sandbox.cluster import Sandbox, SandboxConfig
from operators import crd
from tests.e2e.test_bandwidth import (
    REASON,
    dljob,
    finished,
    job_pods,
    start_across_both_nodes,
    wait_for,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.netns,
    pytest.mark.skipif(bool(REASON), reason=REASON or "runs"),
]

NIC_GBPS = 0.4
COMPUTE_SHARE = 0.45  # of the slot period: a sleep
TRANSFER_SHARE = 0.45  # of the slot period: the all-reduce alone at the NIC
ITERATIONS = 10
TOLERANCE = 0.10  # the issue's bound on |measured - model| / model

# Each rank waits for `go` (the test writes the sizes there once the slots are out),
# reads its slot from the podinfo annotations, warms up, then runs ITERATIONS of
# compute, slot, all-reduce; it prints the wall times of its transfers as JSON.
WORKER = """
import json, os, pathlib, time, torch, torch.distributed as dist
from gpuflow.train.batch import parse_annotations
from gpuflow.train.commslot import SlotGate, slot_from_annotations
dist.init_process_group("gloo")
sync = pathlib.Path(os.environ["SYNC_DIR"])
pathlib.Path(sync, "ready-" + os.environ["POD_NAME"]).touch()
while not pathlib.Path(sync, "go").exists():
    time.sleep(0.05)
go = json.loads(pathlib.Path(sync, "go").read_text())
ann = pathlib.Path(os.environ["GPUFLOW_PODINFO_DIR"], "annotations").read_text()
gate = SlotGate(slot_from_annotations(parse_annotations(ann)))
x = torch.ones(go["bytes"] // 4)
dist.all_reduce(x)
starts, ends = [], []
for _ in range(go["iterations"]):
    time.sleep(go["compute_s"])
    gate.wait()
    starts.append(time.time())
    dist.all_reduce(x)
    ends.append(time.time())
print("slots " + json.dumps({"slot": gate.slot is not None, "starts": starts, "ends": ends}))
dist.destroy_process_group()
"""


def slot_job(name: str, sync: Path) -> dict[str, Any]:
    pod_name = {"fieldRef": {"fieldPath": "metadata.name"}}
    env: list[dict[str, Any]] = [
        {"name": "GLOO_SOCKET_IFNAME", "value": "eth0"},
        {"name": "SYNC_DIR", "value": str(sync)},
        {"name": "POD_NAME", "valueFrom": pod_name},
    ]
    job = dljob(name, WORKER, 2, env)
    job["spec"]["model"] = "ncf"
    job["spec"]["expectedDurationSeconds"] = 60.0
    return job


def pod_annotations(sb: Sandbox, job: str) -> list[dict[str, str]]:
    return [p.metadata.annotations or {} for p in job_pods(sb, job)]


def slots(sb: Sandbox) -> dict[str, tuple[float, float]] | None:
    """Each job's (period, offset), once every pod of both carries the same per job."""
    out = {}
    for job in ("a", "b"):
        pairs = {
            (a.get(crd.ANN_COMM_PERIOD_S), a.get(crd.ANN_COMM_OFFSET_S))
            for a in pod_annotations(sb, job)
        }
        if len(pairs) != 1 or None in next(iter(pairs)):
            return None
        period, offset = next(iter(pairs))
        out[job] = (float(period or "nan"), float(offset or "nan"))
    return out


def borrowing_applied(sb: Sandbox) -> bool:
    """Both agents hold the four pods' classes with a floor (half the NIC)."""
    for node in ("node-0", "node-1"):
        ann = sb.api.get_node(node)["metadata"].get("annotations") or {}
        assert crd.ANN_NODE_EGRESS_ERROR not in ann, ann[crd.ANN_NODE_EGRESS_ERROR]
        classes = json.loads(ann.get(crd.ANN_NODE_EGRESS_CLASSES) or "{}")
        if len(classes) != 2 or any(c["floor_gbps"] != NIC_GBPS / 2 for c in classes.values()):
            return False
    return True


def overlap_share(mine: list[tuple[float, float]], theirs: list[tuple[float, float]]) -> float:
    """The share of `mine`'s transfer time during which `theirs` transferred too."""
    shared = sum(max(0.0, min(e, oe) - max(s, os_)) for s, e in mine for os_, oe in theirs)
    return shared / sum(e - s for s, e in mine)


def transfers(sb: Sandbox, pod: Any) -> dict[str, Any]:
    path = next((sb.directory / "pods").glob(f"default_{pod.metadata.name}_*/worker.log"))
    text = path.read_text(errors="replace")
    line = next((ln for ln in text.splitlines() if ln.startswith("slots ")), None)
    assert line is not None, text[-2000:]
    doc: dict[str, Any] = json.loads(line[len("slots ") :])
    return doc


# Real processes' iteration times against the slot period (within 10 %): a loaded CI
# machine has missed it once while it passed alone; both tries must miss.
@pytest.mark.flaky(reruns=1)
def test_the_operators_slots_interleave_two_jobs_and_beat_fair_sharing(tmp_path: Path) -> None:
    config = SandboxConfig(
        nodes=2,
        gpus_per_node=2,
        nic_gbps=(NIC_GBPS,),
        placement="first-fit",
        network="cassini",
        directory=tmp_path / "sandbox",
    )
    sync = tmp_path / "sync"
    sync.mkdir()
    with Sandbox(config) as sb:
        started = time.monotonic()
        start_across_both_nodes(sb, slot_job, sync, tmp_path / "release")

        # The operator's slots: one period, offsets half of it apart; the agents'
        # classes: each pod may take the whole NIC and is guaranteed half.
        got = wait_for("both jobs' slots", lambda: slots(sb), 30)
        period = got["a"][0]
        assert got["b"][0] == period
        gap = (got["b"][1] - got["a"][1]) % period
        assert gap == pytest.approx(period / 2, abs=2e-3)
        for job in ("a", "b"):
            for ann in pod_annotations(sb, job):
                assert ann[crd.ANN_EGRESS_GBPS] == repr(NIC_GBPS)
                assert ann[crd.ANN_EGRESS_FLOOR_GBPS] == repr(NIC_GBPS / 2)
        wait_for("the borrowing classes applied", lambda: borrowing_applied(sb), 30)

        # Workers sized to the period, released together.
        compute_s = COMPUTE_SHARE * period
        size = int(TRANSFER_SHARE * period * NIC_GBPS * 1e9 / 8) // 4 * 4
        wait_for("all ranks warm", lambda: len(os.listdir(sync)) == 4, 60)
        go = {"compute_s": compute_s, "bytes": size, "iterations": ITERATIONS}
        (sync / "go.tmp").write_text(json.dumps(go))
        (sync / "go.tmp").rename(sync / "go")
        wait_for(
            "both jobs to finish",
            lambda: finished(sb, ["a", "b"]),
            150 - (time.monotonic() - started),
        )

        runs = {
            job: transfers(sb, min(job_pods(sb, job), key=lambda p: p.metadata.name))
            for job in ("a", "b")
        }
    assert all(run["slot"] for run in runs.values())
    # A 2-rank ring all-reduce of S bytes sends S each way per rank: the model's burst.
    in_phase_s = shared_link_iteration_s([compute_s] * 2, [size / 1e6] * 2, [0.0, 0.0], NIC_GBPS)[0]
    for job, run in runs.items():
        starts = run["starts"][2:]  # the first slots settle the pair's turns
        mean_s = (starts[-1] - starts[0]) / (len(starts) - 1)
        print(
            f"{job}: mean iteration {mean_s:.3f} s, slot period {period:.3f} s,"
            f" fair in phase {in_phase_s:.3f} s"
        )
        assert mean_s == pytest.approx(period, rel=TOLERANCE), job
        assert mean_s < in_phase_s * (1 - TOLERANCE), job
    bursts = {j: list(zip(r["starts"][2:], r["ends"][2:], strict=True)) for j, r in runs.items()}
    overlap = overlap_share(bursts["a"], bursts["b"])
    print(f"transfers overlapping: {overlap:.2f}")
    assert overlap < 0.2
