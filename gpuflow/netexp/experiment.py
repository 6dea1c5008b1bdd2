"""Runs synthetic jobs on a shared link and measures their iteration times.

    with SharedLink.create(capacity_gbps=0.04, jobs=2) as link:
        solo = calibrate(link, compute_s=0.3, comm_mb=1.0)
        runs = run_jobs(link, [SyntheticJob(0.3, 1.0, 0.0), SyntheticJob(0.3, 1.0, 0.25)])
        runs[1].mean_iteration_s

Every job's sender (gpuflow.netexp.worker) starts its first iteration at a common
wall time plus its offset_s, so jobs with offsets differing by half a period start
shifted by half a period; afterwards they run free (or held to a comm slot). The
mean iteration time is taken over the iterations that lie wholly within the
measuring window, which opens after `warmup_s` and closes before any job stops, so
every job contends with all the others for the whole window.

`calibrate` runs one job alone: what one transfer takes with the link to itself,
and so the link's effective capacity for this traffic (TCP's framing, the
acknowledgement's round trip, slow start after the compute phase's idle time), and
the effective compute phase (a sleep overshoots by the scheduler's latency on a
loaded machine). Those two are what a model of the link should be fed.
Called by bench/network_phases.py and tests/e2e/test_phases.py.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from gpuflow.netexp.link import SharedLink
from gpuflow.train.commslot import CommSlot

FIRST_PORT = 5301
# Time for every process to start and connect before the first iteration: a Python
# start under the load of a shared 2-core machine takes up to a second or two.
STARTUP_S = 4.0
BYTES_PER_MB = 1_000_000  # MB of 10^6 bytes, as controller/network speaks
PROCESS_TIMEOUT_S = 30.0


class ExperimentError(RuntimeError):
    """A worker failed, or did not get ready before the common start."""


@dataclass(frozen=True)
class SyntheticJob:
    """A job of the experiment: compute, then comm_mb over the link, every iteration;
    its first iteration starts offset_s after the common start."""

    compute_s: float
    comm_mb: float
    offset_s: float = 0.0
    slot: CommSlot | None = None


@dataclass(frozen=True)
class JobRun:
    """What one job did inside the measuring window, and every communication it made
    (for another job's overlap near the window's edges, where the jobs' own
    iterations in the window differ by one)."""

    iteration_s: tuple[float, ...]
    comm_s: tuple[tuple[float, float], ...]  # (start, end) wall times, slot wait excluded
    all_comm_s: tuple[tuple[float, float], ...]  # the same, window or not

    @property
    def transfer_s(self) -> tuple[float, ...]:
        return tuple(end - start for start, end in self.comm_s)

    @property
    def mean_iteration_s(self) -> float:
        return statistics.fmean(self.iteration_s)

    @property
    def mean_transfer_s(self) -> float:
        return statistics.fmean(self.transfer_s)


@dataclass(frozen=True)
class Calibration:
    """One job alone on the link: its effective compute phase and link capacity."""

    compute_s: float
    transfer_s: float
    capacity_gbps: float
    iteration_s: float


def run_jobs(
    link: SharedLink,
    jobs: list[SyntheticJob],
    warmup_s: float = 2.0,
    measure_s: float = 10.0,
    *,
    lockstep: bool = False,
) -> list[JobRun]:
    """Run `jobs` together on `link` (one per class, in order) and measure them.
    With `lockstep`, every iteration of every job starts when all jobs ended the
    previous one: jobs in phase stay in phase (run free, they drift apart)."""
    if not 1 <= len(jobs) <= link.jobs:
        raise ValueError(f"{len(jobs)} jobs on a link built for {link.jobs}")
    if lockstep and any(job.offset_s or job.slot for job in jobs):
        raise ValueError("lockstep jobs run in phase: no offset_s, no slot")
    start_at = time.time() + STARTUP_S
    window = (start_at + warmup_s, start_at + warmup_s + measure_s)
    # Every job keeps going a while after the window, so none measures alone.
    stop_at = window[1] + warmup_s
    receivers: list[subprocess.Popen[str]] = []
    senders: list[subprocess.Popen[str]] = []
    try:
        for i, job in enumerate(jobs):
            receivers.append(_spawn(link, link.receiver_ns, [
                "receive", "--bind", link.receiver_ip, "--port", str(FIRST_PORT + i),
                "--comm-bytes", str(_bytes(job))]))  # fmt: skip
        for i, job in enumerate(jobs):
            args = ["send", "--src", link.job_ip(i), "--dst", link.receiver_ip,
                    "--port", str(FIRST_PORT + i), "--comm-bytes", str(_bytes(job)),
                    "--compute-s", str(job.compute_s), "--start-at", repr(start_at + job.offset_s),
                    "--stop-at", repr(stop_at)]  # fmt: skip
            if lockstep:
                args.append("--lockstep")
            if job.slot is not None:
                args += ["--slot-period-s", repr(job.slot.period_s),
                         "--slot-offset-s", repr(job.slot.offset_s)]  # fmt: skip
            senders.append(_spawn(link, link.sender_ns, args, stdin=lockstep))
        if lockstep:
            _conduct(senders, start_at, stop_at)
        timeout = stop_at - time.time() + PROCESS_TIMEOUT_S
        return [
            _measure(i, _result(p, timeout), start_at, jobs[i], window)
            for i, p in enumerate(senders)
        ]
    finally:
        for proc in senders + receivers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


def calibrate(
    link: SharedLink, compute_s: float, comm_mb: float, measure_s: float = 5.0
) -> Calibration:
    """One job alone on `link` (module docstring)."""
    (run,) = run_jobs(link, [SyntheticJob(compute_s, comm_mb)], warmup_s=1.0, measure_s=measure_s)
    transfer = run.mean_transfer_s
    return Calibration(
        compute_s=run.mean_iteration_s - transfer,
        transfer_s=transfer,
        capacity_gbps=comm_mb * 8 / 1000 / transfer,
        iteration_s=run.mean_iteration_s,
    )


def _bytes(job: SyntheticJob) -> int:
    return round(job.comm_mb * BYTES_PER_MB)


def _spawn(
    link: SharedLink, ns: str, args: list[str], stdin: bool = False
) -> subprocess.Popen[str]:
    argv = [*link.exec_prefix(ns), sys.executable, "-m", "gpuflow.netexp.worker", *args]
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _conduct(senders: list[subprocess.Popen[str]], start_at: float, stop_at: float) -> None:
    """Lockstep: wait for every sender's "ready", then tell all "go" (at start_at the
    first time), until stop_at; then "stop"."""
    first = True
    while True:
        for proc in senders:
            assert proc.stdout is not None
            if proc.stdout.readline() != "ready\n":
                raise ExperimentError(f"a sender failed: {_stderr(proc)}")
        if first:
            time.sleep(max(0.0, start_at - time.time()))
            first = False
        word = "go\n" if time.time() < stop_at else "stop\n"
        for proc in senders:
            assert proc.stdin is not None
            proc.stdin.write(word)
            proc.stdin.flush()
        if word == "stop\n":
            return


def _stderr(proc: subprocess.Popen[str]) -> str:
    proc.kill()
    proc.wait()
    return "" if proc.stderr is None else proc.stderr.read().strip()[-500:]


def _result(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, list[float] | float]:
    if proc.stdin is not None:
        proc.stdin.close()  # a lockstep sender was told "stop" already
        proc.stdin = None  # so that communicate() does not write to it
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 1.0))
    except subprocess.TimeoutExpired as exc:
        raise ExperimentError("a sender did not finish in time") from exc
    if proc.returncode != 0:
        raise ExperimentError(f"a sender failed ({proc.returncode}): {err.strip()[-500:]}")
    result: dict[str, list[float] | float] = json.loads(out.splitlines()[-1])
    return result


def _measure(
    i: int,
    result: dict[str, list[float] | float],
    start_at: float,
    job: SyntheticJob,
    window: tuple[float, float],
) -> JobRun:
    ready, comm_starts, ends = result["ready_s"], result["comm_start_s"], result["end_s"]
    assert isinstance(ready, float) and isinstance(comm_starts, list) and isinstance(ends, list)
    first = start_at + job.offset_s
    if ready > first:
        raise ExperimentError(f"job {i} was ready {ready - first:.2f} s after its start")
    starts = [first, *ends[:-1]]
    inside = [k for k in range(len(ends)) if starts[k] >= window[0] and ends[k] <= window[1]]
    if len(inside) < 2:
        raise ExperimentError(f"job {i}: {len(inside)} iterations inside the window")
    return JobRun(
        iteration_s=tuple(ends[k] - starts[k] for k in inside),
        comm_s=tuple((comm_starts[k], ends[k]) for k in inside),
        all_comm_s=tuple(zip(comm_starts, ends, strict=True)),
    )


def overlap_fraction(run: JobRun, others: list[JobRun]) -> float:
    """The fraction of `run`'s communication time during which another job
    communicated too (0: perfectly interleaved). The others' communications count
    whether in their own window or not: they ran on past it, so `run` never
    communicated alone at the window's edges."""
    busy = sorted(span for other in others for span in other.all_comm_s)
    shared = 0.0
    for start, end in run.comm_s:
        covered_to = start
        for o_start, o_end in busy:
            lo, hi = max(o_start, covered_to), min(o_end, end)
            if hi > lo:
                shared += hi - lo
                covered_to = hi
    return shared / sum(run.transfer_s)
