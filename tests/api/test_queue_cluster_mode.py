"""Cluster mode: GET /order and GET /jobs/{id}/timeline from what the operator writes
in DLJob status (status.queuePosition, status.preemptedBy, status.allocation; see
operators/queue_status.py), recorded by the API's follower (api.cluster_mode.history), on
SQLite and PostgreSQL, on the session's real control plane; another tenant's job
counted, never named."""

from __future__ import annotations

from typing import Any

from api.settings import Settings
from operators.dljobs.resources import PREEMPTED, QUEUED, Reasoned, status_mutator
from operators.kube import Obj
from operators.queue_status import position_mutator
from tests.api.builders import auth, wait_for
from tests.api.test_cluster_mode import (  # noqa: F401 (fixtures)
    JOBS,
    T0,
    Operatorish,
    any_db,
    kubectl_dljob,
    service,
    settings,
    settle,
)
from tests.operators.real_cluster import RealCluster

TIMEOUT_S = 60.0


def _queued(op: Operatorish, at_s: float, position: int) -> None:
    why = Reasoned("ShorterJobsFirst", "jobs with less remaining time hold the GPUs")
    obj = op.api.get_dljob("default", op.name)
    op.api.update_status(obj, _both(status_mutator(QUEUED, why, now_s=at_s), position))


def _both(mutate: Any, position: int | None) -> Any:
    def run(obj: Obj) -> Obj | None:
        new = mutate(obj) or obj
        return position_mutator(position)(new) or new

    return run


def _id(obj: Obj) -> str:
    return str(obj["metadata"]["uid"]).replace("-", "")


def test_queue_and_timeline_from_dljob_status(
    any_db: Settings,  # noqa: F811
    kube_cluster: RealCluster,
) -> None:
    with service(any_db) as client:
        root = auth(client, "root", "ops", "admin")
        alice = auth(client, "alice", "vision")
        mine = _id(kubectl_dljob(kube_cluster, "train", "vision"))
        theirs = _id(kubectl_dljob(kube_cluster, "other", "nlp"))
        train, other = Operatorish(kube_cluster, "train"), Operatorish(kube_cluster, "other")
        _queued(other, T0, 1)
        _queued(train, T0, 2)

        def queue(headers: dict[str, str]) -> list[tuple[str, int | None]]:
            r = client.get("/api/v1/order", headers=headers)
            assert r.status_code == 200, r.text
            return [(e["id"], e["position"]) for e in r.json()["data"]]

        wait_for(lambda: queue(root) == [(theirs, 1), (mine, 2)], timeout_s=TIMEOUT_S)
        body = client.get("/api/v1/order", headers=alice).json()
        assert [(e["id"], e["position"]) for e in body["data"]] == [(mine, 2)]
        assert (body["waiting"], body["others_waiting"]) == (2, 1)

        # Runs on node-0, then the other tenant's job takes its GPUs.
        train.admitted(T0 + 1, attempt=1)
        train.running(T0 + 2)
        obj = train.api.get_dljob("default", "train")
        why = Reasoned(
            "PreemptedByPolicy", f"preempted by the srtf policy; preempted by job {theirs}"
        )
        pending = Reasoned("Restarting", "waits to restart from its checkpoint")
        stop = status_mutator(
            PREEMPTED, why, pending=pending, fields={"preemptedBy": [theirs]}, now_s=T0 + 3
        )
        train.api.update_status(obj, _both(stop, 1))

        def stopped() -> dict[str, Any] | None:
            r = client.get(f"{JOBS}/{mine}/timeline", headers=alice)
            assert r.status_code == 200, r.text
            line: dict[str, Any] = r.json()
            states = [i["state"] for i in line["intervals"]]
            return line if states == ["Queued", "Running", "Preempted"] else None

        line = wait_for(stopped, timeout_s=TIMEOUT_S)
        settle(client)
        ran, last = line["intervals"][1], line["intervals"][2]
        assert ran["allocation"] == [{"node": "node-0", "gpus": [0, 1, 2, 3]}]
        assert (ran["from_s"], last["from_s"]) == (T0 + 2, T0 + 3)
        assert last["preempted_by"] == [{"id": None, "name": None}]
        assert theirs not in str(line) and "another tenant's job" in last["reason"]
        seen = client.get(f"{JOBS}/{mine}/timeline", headers=root).json()["intervals"][2]
        assert seen["preempted_by"] == [{"id": theirs, "name": "other"}]
        events = client.get(f"{JOBS}/{mine}/events", headers=alice).json()["data"]
        assert events[-1]["kind"] == "preempted" and theirs not in str(events)
        job = client.get(f"{JOBS}/{mine}", headers=alice).json()
        assert (job["status"], job["queue_position"]) == ("Preempted", 1)
