"""Operator benchmark: DLJobs onto DGX-1 nodes, timed from the operator's start.

    PYTHONPATH=. .venv/bin/python bench/operator.py [--nodes 1000] [--jobs 2000]
    PYTHONPATH=. .venv/bin/python bench/operator.py --nodes 2000 --jobs 10000

Starts the test API server (gpuflow/sandbox/kube) in this process, creates the nodes with
the GPU annotation the node agent publishes (DGX-1 V100) and the DLJobs (1, 2, 4 or 8
GPUs, seeded), then starts `gpuflow operator run -v` as a subprocess and times until
every job has its worker pods created and bound (nodeName set), counted from the
server's store (no HTTP list competing with the operator for the server).

Prints, for docs/benchmarks.md: first and last placement after the operator's start;
the operator's CPU seconds (from /proc, until all were placed) next to this process's
(the API server's, which shares the machine's cores); the round latency the operator
reports (its `gpuflow_operator_round_seconds` histogram on --metrics-port: rounds, sum,
mean) and, from its DEBUG `round` log lines, the median and largest round. Goals:
issue 7, 2,000 onto 1,000 nodes within 60 s; issue 16, 10,000 onto 2,000 within 60 s.

The server keeps `--history` watch events (default 200,000): at 10,000 jobs the store
writes ~40,000 events in the first seconds, and the test server's default 10,000 would
send the operator's watches 410 Gone (then a relist) where a real API server's
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpuflow.sandbox.kube.apiserver import KubeServer, ServerOptions
from operators import crd
from operators.kube import KubeApi
from tests.operators.builders import install_crd, make_dljob, make_node_body

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.25
SETTLE_S = 120.0
IDLE_ROUNDS = 2
GPUS_PER_NODE = 8  # DGX-1 (tests/operators/builders.make_node_body)
ROUND_LINE = re.compile(r" round n=(\d+) seconds=([0-9.]+) jobs=(\d+) running=(\d+)")


def default_sizes(nodes: int, jobs: int) -> list[int]:
    """The longest prefix of 1, 2, 4, 8 GPUs whose mean job fits the cluster with 5 %
    to spare, so that every job can be placed at once: 1,2,4,8 for 2,000 jobs on 1,000
    nodes (7,650 of 8,000 GPUs), 1,2 for 10,000 on 2,000 (~15,000 of 16,000)."""
    sizes = [1, 2, 4, 8]
    while len(sizes) > 1 and jobs * statistics.mean(sizes) > 0.95 * nodes * GPUS_PER_NODE:
        sizes.pop()
    return sizes


class Placements:
    """Counts the jobs with a bound worker pod as the store commits pods (its watch
    history read in-process: no HTTP list competing with the operator for the server;
    the operator creates a job's pods with nodeName set, all in one round)."""

    def __init__(self, server: KubeServer) -> None:
        rt = server.registry.lookup("", "v1", "pods")
        assert rt is not None
        self.store, self.key = server.store, rt.key
        self.jobs: set[str] = set()
        self._rv = self.store.resource_version

    def count(self, wait_s: float) -> int:
        events, self._rv = self.store.events_after(self.key, self._rv, wait_s, lambda: False)
        for event in events:
            labels = event.obj["metadata"].get("labels") or {}
            if labels.get(crd.LABEL_MANAGED) == crd.MANAGER and event.obj["spec"].get("nodeName"):
                self.jobs.add(labels[crd.LABEL_JOB])
        return len(self.jobs)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def round_histogram(port: int) -> tuple[int, float]:
    """(rounds, seconds in rounds) from the operator's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    count = re.search(r"^gpuflow_operator_round_seconds_count (\S+)$", text, re.M)
    total = re.search(r"^gpuflow_operator_round_seconds_sum (\S+)$", text, re.M)
    return int(float(count.group(1))) if count else 0, float(total.group(1)) if total else 0.0


def settle_rounds(port: int) -> tuple[int, float]:
    """Waits for the round that placed the last job to end (its writes included) and
    for IDLE_ROUNDS rounds after it, which have nothing to do (the operator's
    --interval, 5 s, apart); returns the histogram's rounds and seconds then."""
    deadline = time.monotonic() + SETTLE_S
    first = None
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--history", type=int, default=200_000, help="watch events the server keeps")
    p.add_argument("--log", type=Path, help="the operator's log (default: a temporary file)")
    p.add_argument(
        "--sizes",
        type=lambda text: [int(g) for g in text.split(",")],
        help="GPUs per job to draw from (default: the most of 1,2,4,8 that fits, see sizes())",
    )
    args = p.parse_args()
    rng = random.Random(42)
    log_path = args.log or Path(tempfile.mkstemp(prefix="operator-bench-", suffix=".log")[1])
    with KubeServer(options=ServerOptions(history_limit=args.history)) as server:
        client = server.api_client()
        api = KubeApi(client)
        install_crd(client)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda i: api.create_node(make_node_body(f"node-{i:04d}", rack=f"r{i // 16}")),
                    range(args.nodes),
                )
            )
            choices = args.sizes or default_sizes(args.nodes, args.jobs)
            sizes = [rng.choice(choices) for _ in range(args.jobs)]
            jobs = [make_dljob(f"job-{i:05d}", g) for i, g in enumerate(sizes)]
            list(pool.map(lambda j: api.create_dljob("default", j), jobs))
        setup_s = time.perf_counter() - t0
        print(
            f"setup: {args.nodes} nodes, {args.jobs} DLJobs ({sum(sizes)} GPUs) in {setup_s:.1f} s"
        )
        port = free_port()
        cmd = [sys.executable, "-m", "gpuflow.operator_cmd", "operator", "run", "-v",
               "--kubeconfig", str(server.kubeconfig), "--lease-duration", "15",
               "--metrics-port", str(port)]  # fmt: skip
        with log_path.open("w") as log:
            placements = Placements(server)
            t1, server_cpu0 = time.perf_counter(), time.process_time()
            proc = subprocess.Popen(cmd, cwd=ROOT, stderr=log)
            try:
                placed, first_s = 0, None
                while placed < args.jobs and time.perf_counter() - t1 < args.timeout:
                    placed = placements.count(POLL_S)
                    if placed and first_s is None:
                        first_s = time.perf_counter() - t1
                total_s = time.perf_counter() - t1
                server_cpu_s = time.process_time() - server_cpu0
                operator_cpu_s = cpu_s(proc.pid)
                rounds, in_rounds_s = settle_rounds(port)
            finally:
                proc.kill()
                proc.wait()
        report(args, placed, first_s, total_s, operator_cpu_s, server_cpu_s, rounds, in_rounds_s)
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


def report(
    args: argparse.Namespace,
    placed: int,
    first_s: float | None,
    total_s: float,
    operator_cpu_s: float,
    server_cpu_s: float,
    rounds: int,
    in_rounds_s: float,
) -> None:
    print(f"operator: first job placed {first_s or 0:.1f} s after start (process start included)")
    print(f"operator: {placed}/{args.jobs} jobs' pods created and bound in {total_s:.1f} s")
    print(
        f"cpu until then: operator {operator_cpu_s:.1f} s, API server and bench"
        f" {server_cpu_s:.1f} s (2 cores: {2 * total_s:.0f} core-s)"
    )
    mean = in_rounds_s / rounds if rounds else 0.0
    print(
        f"round latency (gpuflow_operator_round_seconds): {rounds} rounds,"
        f" {in_rounds_s:.1f} s in rounds, mean {mean:.3f} s"
    )
    print(
        "goal: all placed within 60 s:",
        "met" if placed >= args.jobs and total_s <= 60 else "NOT met",
    )


if __name__ == "__main__":
    main()
