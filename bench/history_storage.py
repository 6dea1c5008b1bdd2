"""Issue 30 item 4's Show: what the live cluster's history costs to keep, in rows and
bytes, for a 1,000-node x 8-GPU cluster over a day, on SQLite and PostgreSQL; and
how long a sample takes to write and the history routes take to answer.

    PYTHONPATH=. .venv/bin/python -m bench.history_storage [--nodes 1000] [--hours 24]
        [--database sqlite postgresql]

Runs api.samples' own path after the cluster view: every `sample_s` (30 s, the
default setting) of a simulated day, `build_sample` on the nodes, their GPUs'
readings and the tenants' jobs, `write` and a commit, and every `coarse_s` (5 min)
`compact` with the default settings (samples kept as taken for 1 h, then 5-min bins;
a retention of 7 days, which a day does not reach), as api.samples.sampler does.
The nodes are cluster mode's fullest rows: every GPU with a utilisation, a share,
memory, temperature, power and ECC figures (local mode's rows have nulls in place
of the last three, and are shorter), varied at each sample from a seeded RNG; 5,000
jobs of 20 tenants hold the GPUs, 500 wait. The describe call the sampler makes first
is not timed here (docs/benchmarks.md, "Dashboard at 1,000 nodes", times it).

At the end: each table's rows and bytes (SQLite: the dbstat table's pages of the table
and its index; PostgreSQL: pg_total_relation_size, table, TOAST and indexes, after
VACUUM), and the routes' times (the median of three calls) for the day's window at
their default step (240 bins) through the API (TestClient, local mode on the same
database, its own sampler off).
PostgreSQL: a database of its own on the tests' server (tests/postgres.py), dropped
after. Prints one block per database, for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.samples.compaction import compact
from api.samples.rows import GpuReading, Waiting, build_sample
from api.samples.sampler import write
from api.schemas.cluster import GpuPublic, GpuSharePublic, NodePublic
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.store.migrations import upgrade
from tests.api.builders import auth
from tests.postgres import migrated_database

GPUS = 8
JOBS = 5000
WAITING = 500
TENANTS = 20
TABLES = ("cluster_samples", "node_samples", "tenant_samples")


def nodes_at(rng: random.Random, count: int) -> list[NodePublic]:
    """`count` nodes of 8 GPUs, each GPU held by one of the jobs (a few shared in two)."""
    out = []
    for n in range(count):
        gpus = []
        for i in range(GPUS):
            job = f"j{(n * GPUS + i) % JOBS}"
            shares = [GpuSharePublic(job=job, fraction=1.0)]
            if rng.random() < 0.05:
                shares = [
                    GpuSharePublic(job=job, fraction=0.5),
                    GpuSharePublic(job="j0", fraction=0.5),
                ]
            gpus.append(GpuPublic(index=i, shares=shares, util=rng.random()))
        out.append(
            NodePublic(name=f"node-{n}", rack=n // 32, gpu_type="H100", gpus=GPUS,
                       gpus_allocated=float(GPUS), jobs=[], gpu_list=gpus)
        )  # fmt: skip
    return out


def readings_at(rng: random.Random, count: int) -> dict[str, dict[int, GpuReading]]:
    return {
        f"node-{n}": {
            i: GpuReading(
                mem_used_mib=rng.randrange(1_000, 80_000),
                mem_total_mib=81_559,
                temperature_c=rng.randrange(35, 85),
                power_w=rng.uniform(60, 700),
                ecc_errors=0,
                healthy=True,
            )
            for i in range(GPUS)
        }
        for n in range(count)
    }


@contextmanager
def database(kind: str) -> Iterator[Settings]:
    if kind == "postgresql":
        with migrated_database("gpuflow_bench_history") as url:
            yield Settings(database_url=url, cluster="1000x8", history=False)
        return
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), cluster="1000x8", history=False)
        engine = make_engine(settings)
        upgrade(engine)
        engine.dispose()
        yield settings


def table_bytes(kind: str, conn: object) -> dict[str, int]:
    run = conn.execute  # type: ignore[attr-defined]
    if kind == "postgresql":
        return {t: int(run(text(f"SELECT pg_total_relation_size('{t}')")).scalar()) for t in TABLES}
    rows = run(text("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")).all()
    sizes = dict(rows)
    return {
        t: int(sum(v for k, v in sizes.items() if k == t or k.startswith(f"sqlite_autoindex_{t}")))
        for t in TABLES
    }


def run(kind: str, nodes: int, hours: float) -> None:
    rng = random.Random(7)
    tenant_of = {f"j{j}": f"tenant-{j % TENANTS}" for j in range(JOBS)}
    waiting = [Waiting(f"tenant-{j % TENANTS}", 60.0 * j) for j in range(WAITING)]
    variants = [(nodes_at(rng, nodes), readings_at(rng, nodes)) for _ in range(4)]
    with database(kind) as settings:
        engine = make_engine(settings)
        sessions = make_sessionmaker(engine)
        sample_s, coarse_s = settings.history_sample_s, settings.history_coarse_s
        samples = int(hours * 3600 / sample_s)
        write_s: list[float] = []
        compact_s: list[float] = []
        with sessions() as session:
            for k in range(samples + 1):
                t = k * sample_s
                node_list, readings = variants[k % len(variants)]
                began = time.perf_counter()
                write(session, build_sample(t, sample_s, node_list, readings, tenant_of, waiting))
                session.commit()
                write_s.append(time.perf_counter() - began)
                if t % coarse_s == 0:
                    began = time.perf_counter()
                    compact(
                        session, t, settings.history_full_s, coarse_s, settings.history_retention_s
                    )
                    compact_s.append(time.perf_counter() - began)
        if kind == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE"))
        with engine.connect() as conn:
            counts = {
                t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() or 0)
                for t in TABLES
            }
            sizes = table_bytes(kind, conn)
        engine.dispose()
        end = samples * sample_s
        with TestClient(create_app(settings)) as client:
            admin = auth(client, "root", "ops", "admin")
            times = {}
            for path in ("cluster", "nodes", "nodes/node-7/gpus", "tenants"):
                took = []
                for _ in range(3):  # the first call warms the app: the median of three
                    began = time.perf_counter()
                    r = client.get(
                        f"/api/v1/history/{path}", params={"from_s": 0, "to_s": end}, headers=admin
                    )
                    took.append(time.perf_counter() - began)
                times[path] = (sorted(took)[1], len(r.content), r.status_code)
        write_s.sort()
        compact_s.sort()
        print(f"== {kind}: {nodes} nodes x {GPUS} GPUs, {hours:g} h, a sample every {sample_s:g} s")
        print(
            f"sample write: median {write_s[len(write_s) // 2] * 1000:.0f} ms, "
            f"p99 {write_s[int(len(write_s) * 0.99)] * 1000:.0f} ms; compaction: median "
            f"{compact_s[len(compact_s) // 2] * 1000:.0f} ms, max {compact_s[-1] * 1000:.0f} ms"
        )
        for t in TABLES:
            print(
                f"{t}: {counts[t]:,} rows, {sizes[t] / 2**20:.1f} MiB "
                f"({sizes[t] / max(1, counts[t]):.0f} B a row)"
            )
        print(f"total: {sum(sizes.values()) / 2**20:.1f} MiB")
        for path, (took, size, code) in times.items():
            print(f"GET /history/{path} (the day, 240 bins): {took * 1000:.0f} ms, "
                  f"{size / 1024:.0f} KiB, HTTP {code}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--database", nargs="+", default=["sqlite", "postgresql"],
                        choices=["sqlite", "postgresql"])  # fmt: skip
    args = parser.parse_args()
    for kind in args.database:
        run(kind, args.nodes, args.hours)


if __name__ == "__main__":
    main()
