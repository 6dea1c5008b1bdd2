"""Replays across tenants: one tenant's large replays against another's submissions.

    .venv/bin/python bench/replay_fairness.py [--large 12500x8] [--replays 10]
                                              [--concurrency 1] [--pg postgresql://...]

Starts `gpuflow serve` (bench/scratch_server.py: a scratch PostgreSQL database, local
mode, replays in GPUFLOW_REPLAY_CONCURRENCY processes of its own). Tenant "other"
submits jobs over two keep-alive connections the whole time; tenant "big" POSTs
--replays replays of a 200-job trace on the --large cluster one after another, then
"other" POSTs one replay of a 40-job trace on 2x4. Prints the latency of big's POSTs,
other's job-submission p50/p99 while quiet, while big's replays are being accepted
and while they run, and when other's small replay finished: seconds after it was
submitted and how many of big's replays had finished by then (issue 28, item 5: the
service took 52.5 s and finished it last). Figures go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

# Run as a script, this folder comes first on sys.path and bench/api.py would hide the
# api package: put the project root first (as bench/api.py does).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]
from bench.scratch_server import scratch_server  # noqa: E402  (after the path swap)

JOB = {"name": "bench", "num_gpus": 1, "model": "resnet50", "duration_s": 3600.0}
QUIET_S = 3.0  # other's submissions alone, before big's replays arrive
RUNNING_S = 5.0  # and after the last of them was accepted


async def _submit_jobs(
    http: httpx.AsyncClient, stop: asyncio.Event, samples: list[tuple[float, float]]
) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        r = await http.post("/api/v1/jobs", json=JOB)
        samples.append((start, time.perf_counter() - start))
        if r.status_code != 201:
            raise SystemExit(f"job submission failed: {r.status_code} {r.text}")


def _percentiles(samples: list[tuple[float, float]], t0: float, t1: float) -> dict[str, Any]:
    ms = np.array([lat for at, lat in samples if t0 <= at < t1]) * 1000
    if not len(ms):
        return {"n": 0}
    p50, p99 = np.percentile(ms, 50), np.percentile(ms, 99)
    return {"n": len(ms), "p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1)}


async def _user(admin: httpx.AsyncClient, name: str) -> dict[str, str]:
    r = await admin.post("/api/v1/users", json={"name": name, "tenant": name})
    user = r.json()
    r = await admin.post(f"/api/v1/users/{user['id']}/tokens", json={"name": "bench"})
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def _trace(http: httpx.AsyncClient, jobs: int, folder: Path) -> int:
    from controller.traces import write_canonical
    from controller.traces.formats.synthetic import generate

    path = folder / f"trace-{jobs}.csv"
    write_canonical(path, generate(jobs, seed=3, cluster_gpus=8, load=0.8))
    with path.open("rb") as f:
        r = await http.post("/api/v1/traces", files={"file": (path.name, f, "text/csv")})
    if r.status_code != 201:
        raise SystemExit(f"trace upload failed: {r.status_code} {r.text}")
    trace_id: int = r.json()["id"]
    return trace_id


async def _finished(http: httpx.AsyncClient, replay_id: int) -> datetime:
    """When the replay ended, by the server's clock."""
    while True:
        row = (await http.get(f"/api/v1/replays/{replay_id}")).json()
        if row["status"] in ("succeeded", "failed"):
            return datetime.fromisoformat(row["finished_at"])
        await asyncio.sleep(0.1)


async def _run(url: str, token: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=120) as admin:
        big_auth, other_auth = await _user(admin, "big"), await _user(admin, "other")
    big = httpx.AsyncClient(base_url=url, headers=big_auth, timeout=120)
    limits = httpx.Limits(max_connections=2)
    other = httpx.AsyncClient(base_url=url, headers=other_auth, timeout=120, limits=limits)
    async with big, other:
        big_trace, small_trace = await _trace(big, 200, folder), await _trace(other, 40, folder)
        stop, samples = asyncio.Event(), []
        load = [asyncio.create_task(_submit_jobs(other, stop, samples)) for _ in range(2)]
        t_quiet = time.perf_counter()
        await asyncio.sleep(QUIET_S)
        t_accept, posts, big_ids = time.perf_counter(), [], []
        body = {"trace_id": big_trace, "policy": "fifo", "cluster": args.large}
        for _ in range(args.replays):
            start = time.perf_counter()
            r = await big.post("/api/v1/replays", json=body)
            posts.append(time.perf_counter() - start)
            if r.status_code != 202:
                raise SystemExit(f"replay refused: {r.status_code} {r.text}")
            big_ids.append(r.json()["id"])
        t_running = time.perf_counter()
        await asyncio.sleep(RUNNING_S)
        t_end = time.perf_counter()
        stop.set()
        await asyncio.gather(*load)
        small = {"trace_id": small_trace, "policy": "fifo", "cluster": "2x4"}
        t_small = time.perf_counter()
        r = await other.post("/api/v1/replays", json=small)
        small_id = r.json()["id"]
        small_done = await _finished(other, small_id)
        t_small_done = time.perf_counter()
        big_done = await asyncio.gather(*(_finished(big, i) for i in big_ids))
    return {
        "large": args.large,
        "replays": args.replays,
        "concurrency": args.concurrency,
        "big_post_ms": {
            "p50": round(float(np.percentile(posts, 50)) * 1000, 1),
            "max": round(max(posts) * 1000, 1),
        },
        "other_jobs_quiet": _percentiles(samples, t_quiet, t_accept),
        "other_jobs_accepting": _percentiles(samples, t_accept, t_running),
        "other_jobs_running": _percentiles(samples, t_running, t_end),
        "small_replay_s": round(t_small_done - t_small, 1),
        "big_finished_before_small": sum(d <= small_done for d in big_done),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--large", default="12500x8", help="big's cluster (100,000 GPUs)")
    p.add_argument("--replays", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=1, help="GPUFLOW_REPLAY_CONCURRENCY")
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1/test", help="admin URL")
    args = p.parse_args()
    os.environ["GPUFLOW_REPLAY_CONCURRENCY"] = str(args.concurrency)
    with tempfile.TemporaryDirectory() as tmp, scratch_server(["--cluster", "16x4"], args.pg) as s:
        print(json.dumps(asyncio.run(_run(s.url, s.token, args, Path(tmp)))))


if __name__ == "__main__":
    main()
