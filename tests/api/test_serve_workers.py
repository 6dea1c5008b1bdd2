"""`gpuflow serve --workers N`: several HTTP processes in cluster mode, each its own app
over the database, against the session's real control plane (`kube_cluster`,
tests/conftest.py); refused in local mode, whose scheduler lives in one process."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import kubernetes
import pytest
from sqlalchemy import func, select

from api.http.security import create_admin
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.store.models import Job, JobEvent
from operators import crd
from tests.api.builders import job_spec, wait_for
from tests.api.conftest import REDIS_URL
from tests.api.test_serve_cmd import SERVE, _free_port, run
from tests.operators.real_cluster import RealCluster

JOBS = "/api/v1/jobs"


@pytest.mark.parametrize(
    ("kubeconfig", "message"),
    [
        (False, "--workers 2 needs cluster mode: local mode schedules in one process"),
        (True, "--workers 2 needs a broker (GPUFLOW_BROKER_URL): replays must run in"),
    ],
)
def test_several_workers_are_refused_outside_cluster_mode_with_a_broker(
    kubeconfig: bool,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GPUFLOW_BROKER_URL", raising=False)
    monkeypatch.delenv("GPUFLOW_KUBECONFIG", raising=False)
    monkeypatch.delenv("GPUFLOW_IN_CLUSTER", raising=False)
    data = tmp_path / "data"
    data.mkdir()
    if kubeconfig:
        monkeypatch.setenv("GPUFLOW_KUBECONFIG", str(tmp_path / "kubeconfig"))
    assert run(["serve", "--workers", "2", "--data-dir", str(data)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"gpuflow: error: {message}")
    assert list(data.iterdir()) == []  # no database made, no lock taken


def _worker_pids(pid: int) -> list[int]:
    """The uvicorn workers among the children of `pid` (multiprocessing's spawn_main)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_cluster_mode_workers_store_each_keyed_submission_once(
    tmp_path: Path, kube_cluster: RealCluster, pg_settings: Settings
) -> None:
    engine = make_engine(pg_settings)
    sessions = make_sessionmaker(engine)
    with sessions() as session:
        token = create_admin(session, "root", "ops")
    port = _free_port()
    env = {
        **os.environ,
        "GPUFLOW_DATABASE_URL": pg_settings.database_url or "",
        "GPUFLOW_KUBECONFIG": str(kube_cluster.kubeconfig),
        "GPUFLOW_KUBE_IMAGE": "registry.example/train:1",
        "GPUFLOW_KUBE_WATCH_TIMEOUT_S": "5",
        "GPUFLOW_BROKER_URL": REDIS_URL,
    }
    cmd = [sys.executable, "-c", SERVE, "serve", "--workers", "2", "--port", str(port)]
    cmd += ["--data-dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def post(i: int) -> httpx.Response:
        # A connection each, so the kernel spreads them over both workers' accepts.
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": f"key-{i % 8}"}
        with httpx.Client(base_url=url, timeout=30) as http:
            return http.post(JOBS, json=job_spec(name=f"job-{i % 8}"), headers=headers)

    try:
        wait_for(up, timeout_s=60, every_s=0.2)
        assert len(_worker_pids(proc.pid)) == 2
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(post, range(48)))  # each of 8 keys six times
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert {r.status_code for r in answers} == {201}, [r.text for r in answers]
    by_key: dict[int, set[str]] = {}
    for i, r in enumerate(answers):
        by_key.setdefault(i % 8, set()).add(r.text)
    assert all(len(texts) == 1 for texts in by_key.values())  # one answer per key
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 8
        submitted = select(func.count()).where(JobEvent.kind == "submitted")
        assert session.scalar(submitted) == 8
    engine.dispose()
    custom = kubernetes.client.CustomObjectsApi(kube_cluster.client)
    dljobs = custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, crd.PLURAL)["items"]
    assert len(dljobs) == 8
    assert b"Traceback" not in err
