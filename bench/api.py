"""API benchmark: job submissions per second and latency, keyed and unkeyed, on
PostgreSQL and SQLite.

    .venv/bin/python bench/api.py [--jobs 5000] [--clients 16] [--keyed] [--sqlite] [--all]
                                  [--loadgen raw|httpx]
                                  [--pg postgresql://postgres@127.0.0.1/test]

Creates a scratch database (PostgreSQL, or SQLite with --sqlite), starts `gpuflow
serve` (uvicorn, local mode on a 16x4 simulated cluster: one process, see
docs/benchmarks.md) on a loopback port, and has --clients concurrent keep-alive
connections POST --jobs jobs in all (closed loop: each sends its next request when
the last was answered). With --keyed each request carries its own `Idempotency-Key`,
as `gpuflow submit` and api.client send; --all runs the four (keyed and unkeyed,
PostgreSQL and SQLite) in turn. Prints, a JSON line a run, submissions per second,
latency percentiles, whether a keyed run met the goal, the server's process count and
the CPU seconds the server (all its processes) and the load generator used.

Goal (issue 28): >= 2,000 keyed submissions/s with p99 <= 50 ms on PostgreSQL, and
a keyed p99 <= 100 ms on SQLite, on the 2-core development machine. Figures go in
docs/benchmarks.md.

The load generator shares the machine with the server, so it must be cheap:
`--loadgen raw` (default) is a minimal HTTP/1.1 client on asyncio streams (one
task per connection, a prebuilt request, the response read by Content-Length);
`--loadgen httpx` is httpx.AsyncClient, which costs several times the CPU per
request and, with 16 connections, does not keep them all busy (its pool serialises),
so it measures the client more than the server.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np

# Run as a script, this file's folder comes first on sys.path and its name (api.py)
# would hide the api package: swap it for the project root, then import api in main().
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]
from bench.scratch_server import scratch_server  # noqa: E402  (after the path swap)

SPEC = {"name": "bench", "num_gpus": 2, "model": "resnet50", "duration_s": 3600.0}


def _keys(keyed: bool) -> Iterator[str | None]:
    """The Idempotency-Key of each request: a fresh one each time if `keyed`, else None."""
    if not keyed:
        return itertools.repeat(None)
    prefix = uuid.uuid4().hex[:8]
    return (f"{prefix}-{i}" for i in itertools.count())


async def _client(
    http: httpx.AsyncClient, todo: list[int], latencies: list[float], keys: Iterator[str | None]
) -> None:
    while todo:
        todo.pop()
        key = next(keys)
        headers = {} if key is None else {"Idempotency-Key": key}
        start = time.perf_counter()
        r = await http.post("/api/v1/jobs", json=SPEC, headers=headers)
        latencies.append(time.perf_counter() - start)
        if r.status_code != 201:
            raise SystemExit(f"submission failed: {r.status_code} {r.text}")


async def _load_httpx(
    url: str, token: str, jobs: int, clients: int, keyed: bool
) -> tuple[float, list[float]]:
    keys = _keys(keyed)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits) as http:
        warm: list[float] = []
        await asyncio.gather(*(_client(http, list(range(5)), warm, keys) for _ in range(clients)))
        todo = list(range(jobs))
        latencies: list[float] = []
        start = time.perf_counter()
        await asyncio.gather(*(_client(http, todo, latencies, keys) for _ in range(clients)))
        return time.perf_counter() - start, latencies


def _requests(host: str, port: int, token: str, keyed: bool) -> Callable[[], bytes]:
    """The next request to send: prebuilt, with a fresh Idempotency-Key if `keyed`."""
    body = json.dumps(SPEC).encode()
    head = (
        f"POST /api/v1/jobs HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
    ).encode()
    if not keyed:
        plain = head + b"\r\n" + body
        return lambda: plain
    keys = _keys(keyed)
    return lambda: b"%sIdempotency-Key: %s\r\n\r\n%s" % (head, str(next(keys)).encode(), body)


class _Conn:
    """One keep-alive HTTP/1.1 connection that POSTs the same request again and again."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def run(
        self, request: Callable[[], bytes], todo: list[int], latencies: list[float]
    ) -> None:
        while todo:
            todo.pop()
            start = time.perf_counter()
            status, body = await self.post(request())
            latencies.append(time.perf_counter() - start)
            if status != 201:
                raise SystemExit(f"submission failed: {status} {body.decode(errors='replace')}")


async def _load_raw(
    url: str, token: str, jobs: int, clients: int, keyed: bool
) -> tuple[float, list[float]]:
    host, port = "127.0.0.1", int(url.rpartition(":")[2])
    request = _requests(host, port, token, keyed)
    conns = [_Conn(*await asyncio.open_connection(host, port)) for _ in range(clients)]
    try:
        warm: list[float] = []
        await asyncio.gather(*(c.run(request, list(range(5)), warm) for c in conns))
        todo = list(range(jobs))
        latencies: list[float] = []
        start = time.perf_counter()
        await asyncio.gather(*(c.run(request, todo, latencies) for c in conns))
        return time.perf_counter() - start, latencies
    finally:
        for c in conns:
            c.writer.close()


def _processes(pid: int) -> list[int]:
    """`pid` and its descendants (a server's worker processes), from Linux /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of processes (Linux /proc); an ended one counts 0."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# The goal (issue 28), per database: submissions/s (keyed; None: none set) and p99 ms.
GOAL = {"postgresql": (2000.0, 50.0), "sqlite": (None, 100.0)}


def _run(args: argparse.Namespace, keyed: bool, sqlite: bool) -> dict[str, object]:
    """One server, one load: the figures of a run."""
    with scratch_server(["--cluster", "16x4"], args.pg, sqlite=sqlite) as server:
        load = _load_raw if args.loadgen == "raw" else _load_httpx
        pids = _processes(server.proc.pid)
        server_cpu, client_cpu = _cpu_s(pids), _own_cpu_s()
        try:
            wall_s, lat = asyncio.run(
                load(server.url, server.token, args.jobs, args.clients, keyed)
            )
        except SystemExit:
            sys.stderr.write(server.log.read_text(errors="replace")[-5000:])
            raise
        server_cpu = _cpu_s(pids) - server_cpu
        client_cpu = _own_cpu_s() - client_cpu
    ms = np.array(lat) * 1000
    database = "sqlite" if sqlite else "postgresql"
    rate, p99 = args.jobs / wall_s, float(np.percentile(ms, 99))
    min_rate, max_p99 = GOAL[database]
    met = p99 <= max_p99 and (min_rate is None or rate >= min_rate)
    return {
        "database": database,
        "keyed": keyed,
        "server_processes": len(pids),
        "jobs": args.jobs,
        "clients": args.clients,
        "wall_s": round(wall_s, 2),
        "submissions_per_s": round(rate, 1),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(p99, 1),
        "max_ms": round(float(ms.max()), 1),
        "goal_met": met if keyed else None,  # the goal is for keyed submissions
        "loadgen": args.loadgen,
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_ms_per_job": round(server_cpu / args.jobs * 1000, 3),
        "loadgen_cpu_s": round(client_cpu, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--keyed", action="store_true", help="an Idempotency-Key on each request")
    p.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL")
    p.add_argument(
        "--all", action="store_true", help="keyed and unkeyed on PostgreSQL and SQLite, in turn"
    )
    p.add_argument("--loadgen", choices=["raw", "httpx"], default="raw")
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1/test", help="admin URL")
    args = p.parse_args()
    runs = [(args.keyed, args.sqlite)]
    if args.all:
        runs = [(keyed, sqlite) for sqlite in (False, True) for keyed in (True, False)]
    for keyed, sqlite in runs:
        print(json.dumps(_run(args, keyed, sqlite)), flush=True)


if __name__ == "__main__":
    main()
