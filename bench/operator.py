"""Operator benchmark: DLJobs onto DGX-1 nodes, timed from the operator's start, against
the real control plane or the project's test API server.

    PYTHONPATH=. .venv/bin/python bench/operator.py [--nodes 1000] [--jobs 2000]
    PYTHONPATH=. .venv/bin/python bench/operator.py --nodes 2000 --jobs 10000 [--server test]

`--server real` (the default where the control plane's binaries are built, `make
controlplane`) starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler
(gpuflow/sandbox/controlplane.py) in a temporary folder, or uses the running cluster of
`--kubeconfig` (an admin's: the bench reads /metrics); `--server test` starts
gpuflow/sandbox/kube's KubeServer in this process, as the figures before issue 26 were
measured (bench/operator_servers.py has both). The bench creates the nodes with the GPU
annotation the node agent publishes (DGX-1 V100; on the real server registered Ready as
a kubelet registers, their Leases renewed every 10 s by a few threads) and the DLJobs
(1, 2, 4 or 8 GPUs, seeded), then starts `gpuflow operator run -v` as a subprocess and
times until every job has its worker pods created and bound (nodeName set).

Prints, for docs/benchmarks.md: first and last placement after the operator's start;
the operator's CPU seconds (from /proc, until all were placed) next to this process's
(the test API server's, when it runs here, and the bench's); the round latency the
operator reports (its `gpuflow_operator_round_seconds` histogram on --metrics-port:
rounds, sum, mean) and, from its DEBUG `round` log lines, the median and largest
round; the requests the API server served while the operator placed the jobs, by verb
and resource, the operator's (on the resources it uses, less the bench's own heartbeats
and watch) per second, and its watches (real: open at the end, from
`apiserver_longrunning_requests`; test: watch requests made). Goals: issue 7, 2,000
onto 1,000 nodes within 60 s; issue 16, 10,000 onto 2,000 within 60 s on the test
server; issue 26, the same within 120 s on the real one.

The test server keeps `--history` watch events (default 200,000): at 10,000 jobs the
store writes ~40,000 events in the first seconds, and the test server's default 10,000
would send the operator's watches 410 Gone (then a relist) where a real API server's
five minutes of etcd history would not.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

# Run as a script, bench/ is on sys.path but the project root (for bench.*) may not be.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.operator_servers import (
    BenchServer,
    bench_server,
    node_bodies,
    process_cpu_s,
)
from gpuflow.sandbox.controlplane import Binaries, BinariesMissing
from tests.operators.builders import make_dljob

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.25
SETTLE_S = 120.0
IDLE_ROUNDS = 2
GPUS_PER_NODE = 8  # DGX-1 (tests/operators/builders.make_node_body)
GOAL_S = {"real": 120.0, "test": 60.0}  # issue 26 item 5; issue 16
TOP_REQUESTS = 12  # the verb/resource pairs listed, most first
ROUND_LINE = re.compile(r" round n=(\d+) seconds=([0-9.]+) jobs=(\d+) running=(\d+)")


def default_sizes(nodes: int, jobs: int) -> list[int]:
    """The longest prefix of 1, 2, 4, 8 GPUs whose mean job fits the cluster with 5 %
    to spare, so that every job can be placed at once: 1,2,4,8 for 2,000 jobs on 1,000
    nodes (7,650 of 8,000 GPUs), 1,2 for 10,000 on 2,000 (~15,000 of 16,000)."""
    sizes = [1, 2, 4, 8]
    while len(sizes) > 1 and jobs * statistics.mean(sizes) > 0.95 * nodes * GPUS_PER_NODE:
        sizes.pop()
    return sizes


def default_server() -> str:
    try:
        Binaries.find()
    except BinariesMissing:
        return "test"
    return "real"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def round_histogram(port: int) -> tuple[int, float]:
    """(rounds, seconds in rounds) from the operator's /metrics."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    count = re.search(r"^gpuflow_operator_round_seconds_count (\S+)$", text, re.M)
    total = re.search(r"^gpuflow_operator_round_seconds_sum (\S+)$", text, re.M)
    return int(float(count.group(1))) if count else 0, float(total.group(1)) if total else 0.0


def settle_rounds(port: int) -> tuple[int, float]:
    """Waits for the round that placed the last job to end (its writes included) and
    for IDLE_ROUNDS rounds after it, which have nothing to do (the operator's
    --interval apart); returns the histogram's rounds and seconds then."""
    deadline = time.monotonic() + SETTLE_S
    first = None
    rounds, in_rounds_s = 0, 0.0
    while time.monotonic() < deadline:
        rounds, in_rounds_s = round_histogram(port)
        if rounds and first is None:
            first = rounds
        if first is not None and rounds >= first + IDLE_ROUNDS:
            break
        time.sleep(0.5)
    return rounds, in_rounds_s


def round_lines(log: Path) -> list[tuple[int, float, int, int]]:
    """(n, seconds, jobs, running) of each DEBUG `round` line of the operator's log."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = ROUND_LINE.search(line)
        if m:
            out.append((int(m[1]), float(m[2]), int(m[3]), int(m[4])))
    return out


@dataclass(frozen=True)
class Run:
    """What one run measured, until every job was placed (or the timeout)."""

    placed: int
    first_s: float | None
    total_s: float
    operator_cpu_s: float
    bench_cpu_s: float
    server_cpu_s: dict[str, float]  # the real server's processes', by name
    rounds: int
    in_rounds_s: float
    requests: Counter[str]  # served meanwhile, by "VERB resource"
    request_seconds: dict[str, float]  # spent serving them (real server only)
    store_requests: dict[str, tuple[float, float]]  # (count, seconds) by etcd operation
    operator_requests: int  # the operator's among them
    own_requests: int  # the bench's own among them
    watches: int


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument(
        "--server",
        choices=("real", "test"),
        default=default_server(),
        help="the real control plane (default where its binaries are built) or the test API server",
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="--server real: an admin's kubeconfig of a running scratch cluster, where the"
        " bench makes its Nodes and DLJobs (default: start one)",
    )
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--interval", type=float, default=5.0, help="the operator's --interval")
    p.add_argument(
        "--history", type=int, default=200_000, help="watch events the test server keeps"
    )
    p.add_argument("--log", type=Path, help="the operator's log (default: a temporary file)")
    p.add_argument(
        "--sizes",
        type=lambda text: [int(g) for g in text.split(",")],
        help="GPUs per job to draw from (default: the most of 1,2,4,8 that fits, see sizes())",
    )
    args = p.parse_args(argv)
    if args.kubeconfig is not None and args.server != "real":
        p.error("--kubeconfig: only with --server real")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rng = random.Random(42)
    log_path = args.log or Path(tempfile.mkstemp(prefix="operator-bench-", suffix=".log")[1])
    with bench_server(args.server, args.kubeconfig, args.history) as server:
        print(f"server: {server.name}")
        t0 = time.perf_counter()
        server.create_nodes(node_bodies(args.nodes))
        choices = args.sizes or default_sizes(args.nodes, args.jobs)
        sizes = [rng.choice(choices) for _ in range(args.jobs)]
        jobs = [make_dljob(f"job-{i:05d}", g) for i, g in enumerate(sizes)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda j: server.api.create_dljob("default", j), jobs))
        setup_s = time.perf_counter() - t0
        print(
            f"setup: {args.nodes} nodes, {args.jobs} DLJobs ({sum(sizes)} GPUs) in {setup_s:.1f} s"
        )
        run = measure(args, server, log_path)
        heartbeats = server.heartbeats()
    report(args, run)
    if heartbeats:
        print(heartbeats)
    lines = round_lines(log_path)
    if lines:
        secs = [s for _, s, _, _ in lines]
        big = max(lines, key=lambda r: r[1])
        print(
            f"rounds (log): {len(lines)}, median {statistics.median(secs):.3f} s, largest"
            f" {big[1]:.2f} s (round {big[0]}: {big[2]} jobs seen, {big[3]} running)"
        )
        for n, seconds, seen, running in lines:
            print(f"  round {n}: {seconds:.3f} s, {seen} jobs seen, {running} running")
    print(f"operator log: {log_path}")


def measure(args: argparse.Namespace, server: BenchServer, log_path: Path) -> Run:
    """Start the operator and time it until every job is placed."""
    port = free_port()
    cmd = [sys.executable, "-m", "gpuflow.operator_cmd", "operator", "run", "-v",
           "--kubeconfig", str(server.operator_kubeconfig), "--lease-duration", "15",
           "--interval", str(args.interval), "--metrics-port", str(port)]  # fmt: skip
    with log_path.open("w") as log:
        server.placed(0.0)  # what was placed before (nothing) is not counted as the operator's
        requests0, own0, watches0 = server.requests(), server.own_requests(), server.watches()
        seconds0, store0 = server.request_seconds(), server.store_requests()
        operator0, server_cpu0 = server.operator_requests(), server.cpu_s()
        t1, bench_cpu0 = time.perf_counter(), time.process_time()
        proc = subprocess.Popen(cmd, cwd=ROOT, stderr=log)
        try:
            placed, first_s = 0, None
            while placed < args.jobs and time.perf_counter() - t1 < args.timeout:
                placed = server.placed(POLL_S)
                if placed and first_s is None:
                    first_s = time.perf_counter() - t1
                if proc.poll() is not None:
                    raise SystemExit(f"the operator exited ({proc.returncode}): see {log_path}")
            total_s = time.perf_counter() - t1
            bench_cpu_s = time.process_time() - bench_cpu0
            operator_cpu_s = process_cpu_s(proc.pid)
            server_cpu = Counter(server.cpu_s())
            server_cpu.subtract(server_cpu0)
            requests = server.requests()
            requests.subtract(requests0)
            seconds = server.request_seconds()
            seconds = {key: s - seconds0.get(key, 0.0) for key, s in seconds.items()}
            store = {
                op: (n - store0.get(op, (0.0, 0.0))[0], s - store0.get(op, (0.0, 0.0))[1])
                for op, (n, s) in server.store_requests().items()
            }
            own = server.own_requests() - own0
            operator = server.operator_requests() - operator0
            watches = server.watches() - watches0
            rounds, in_rounds_s = settle_rounds(port)
        finally:
            proc.kill()
            proc.wait()
    return Run(
        placed=placed,
        first_s=first_s,
        total_s=total_s,
        operator_cpu_s=operator_cpu_s,
        bench_cpu_s=bench_cpu_s,
        server_cpu_s=dict(server_cpu),
        rounds=rounds,
        in_rounds_s=in_rounds_s,
        requests=+requests,
        request_seconds=seconds,
        store_requests=store,
        operator_requests=operator,
        own_requests=own,
        watches=watches,
    )


def report(args: argparse.Namespace, run: Run) -> None:
    total_s = run.total_s
    print(
        f"operator: first job placed {run.first_s or 0:.1f} s after start (process start included)"
    )
    print(f"operator: {run.placed}/{args.jobs} jobs' pods created and bound in {total_s:.1f} s")
    where = "API server and bench" if args.server == "test" else "bench"
    cores = os.cpu_count() or 1
    servers = "".join(f", {name} {s:.1f} s" for name, s in run.server_cpu_s.items())
    print(
        f"cpu until then: operator {run.operator_cpu_s:.1f} s, {where}"
        f" {run.bench_cpu_s:.1f} s{servers} ({cores} cores: {cores * total_s:.0f} core-s)"
    )
    mean = run.in_rounds_s / run.rounds if run.rounds else 0.0
    print(
        f"round latency (gpuflow_operator_round_seconds): {run.rounds} rounds,"
        f" {run.in_rounds_s:.1f} s in rounds, mean {mean:.3f} s"
    )
    report_requests(args, run)
    goal_s = GOAL_S[args.server]
    met = run.placed >= args.jobs and total_s <= goal_s
    print(f"goal: all placed within {goal_s:.0f} s:", "met" if met else "NOT met")


def report_requests(args: argparse.Namespace, run: Run) -> None:
    """The requests the API server served until every job was placed: the operator's,
    the bench's own and the control plane's; by verb and resource; their latency and
    the store's (real server); the operator's watches."""
    ops = run.operator_requests
    total = sum(run.requests.values())
    # The counters are read a moment apart: a request or two may fall between them.
    other = max(total - ops - run.own_requests, 0)
    print(
        f"API server requests until then: {total}, the operator's {ops}"
        f" ({ops / run.total_s:.0f}/s, {ops / max(args.jobs, 1):.1f} a job), the bench's own"
        f" {run.own_requests}, the control plane's other {other}"
    )
    print(
        "  by verb and resource: "
        + ", ".join(f"{key} {n}" for key, n in run.requests.most_common(TOP_REQUESTS))
    )
    top = [
        key
        for key, _ in run.requests.most_common(TOP_REQUESTS)
        if key in run.request_seconds and not key.startswith("WATCH")  # open for minutes
    ]
    if top:
        print(
            "  mean latency at the API server: "
            + ", ".join(
                f"{k} {1000 * run.request_seconds[k] / run.requests[k]:.0f} ms" for k in top
            )
        )
    busy = sorted(((n, op, s) for op, (n, s) in run.store_requests.items() if n), reverse=True)
    if busy:
        print(
            "  its store (etcd) meanwhile: "
            + ", ".join(f"{op} {n:.0f} x {1000 * s / n:.1f} ms" for n, op, s in busy[:6])
        )
    kind = "open at the end" if args.server == "real" else "requests made"
    print(f"operator watches ({kind}): {run.watches}")


if __name__ == "__main__":
    main()
