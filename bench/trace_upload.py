"""Trace uploads across tenants: one tenant's large uploads against another's submissions.

    .venv/bin/python bench/trace_upload.py [--jobs 100000] [--uploads 3]
                                           [--pg postgresql://...]

Starts `gpuflow serve` (bench/scratch_server.py: a scratch PostgreSQL database, local
mode). Tenant "other" submits jobs over two keep-alive connections the whole time;
tenant "big" uploads a --jobs-job canonical trace --uploads times, one after another.
Prints the latency of big's uploads and other's job-submission p50/p99 while quiet and
while big's uploads are being parsed (issue 28, item 5: loading a large trace must not
happen in the request thread that answers other users). Figures go in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

# Run as a script, this folder comes first on sys.path and bench/api.py would hide the
# api package: put the project root first (as bench/api.py does).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]
from bench.replay_fairness import _percentiles, _submit_jobs, _user  # noqa: E402
from bench.scratch_server import scratch_server  # noqa: E402

QUIET_S = 3.0  # other's submissions alone, before big's uploads


def _write_trace(jobs: int, folder: Path) -> Path:
    from controller.traces import write_canonical
    from controller.traces.formats.synthetic import generate

    path = folder / f"trace-{jobs}.csv"
    write_canonical(path, generate(jobs, seed=3, cluster_gpus=64, load=0.8))
    return path


async def _upload(http: httpx.AsyncClient, path: Path) -> float:
    start = time.perf_counter()
    with path.open("rb") as f:
        r = await http.post("/api/v1/traces", files={"file": (path.name, f, "text/csv")})
    if r.status_code != 201:
        raise SystemExit(f"trace upload failed: {r.status_code} {r.text}")
    return time.perf_counter() - start


async def _run(url: str, token: str, args: argparse.Namespace, path: Path) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=300) as admin:
        big_auth, other_auth = await _user(admin, "big"), await _user(admin, "other")
    big = httpx.AsyncClient(base_url=url, headers=big_auth, timeout=300)
    limits = httpx.Limits(max_connections=2)
    other = httpx.AsyncClient(base_url=url, headers=other_auth, timeout=300, limits=limits)
    async with big, other:
        await _upload(big, path)  # a first one: a process that checks traces is started
        stop, samples = asyncio.Event(), []
        load = [asyncio.create_task(_submit_jobs(other, stop, samples)) for _ in range(2)]
        t_quiet = time.perf_counter()
        await asyncio.sleep(QUIET_S)
        t_uploads = time.perf_counter()
        uploads = [await _upload(big, path) for _ in range(args.uploads)]
        t_end = time.perf_counter()
        stop.set()
        await asyncio.gather(*load)
    return {
        "jobs": args.jobs,
        "trace_mib": round(path.stat().st_size / 2**20, 1),
        "uploads": args.uploads,
        "big_upload_s": {
            "p50": round(float(np.percentile(uploads, 50)), 2),
            "max": round(max(uploads), 2),
        },
        "other_jobs_quiet": _percentiles(samples, t_quiet, t_uploads),
        "other_jobs_uploading": _percentiles(samples, t_uploads, t_end),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=100_000, help="jobs in big's trace")
    p.add_argument("--uploads", type=int, default=3)
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1/test", help="admin URL")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = _write_trace(args.jobs, Path(tmp))
        with scratch_server(["--cluster", "16x4"], args.pg) as s:
            print(json.dumps(asyncio.run(_run(s.url, s.token, args, path))))


if __name__ == "__main__":
    main()
