"""Real training processes under gpuflow: the example job (examples/train, PyTorch on
CPU through gpuflow.train) in the sandbox (gpuflow/sandbox: the real control plane,
process kubelets, the operator), preempted, killed, and resumed from its checkpoint."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuflow.sandbox.cluster import Sandbox, SandboxConfig
from operators.pods.failure_policy import RestartPolicy
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

STEP_LOG = re.compile(r"step (\d+) loss ([0-9.]+) batch (\d+)")


def example_job(
    name: str, *, steps: int, duration_s: float, sleep_s: float = 0.02, noise_std: float = 0.1
) -> Any:
    """The example as a one-pod DLJob on 2 GPUs with its checkpoint on a claim."""
    command = [
        "python", "-m", "examples.train.train", f"--steps={steps}", "--lr=0.05",
        "--batch-size=64", "--seed=7", "--report-interval-s=0.5",
        "--checkpoint-interval-s=1", f"--step-sleep-s={sleep_s}", f"--noise-std={noise_std}",
    ]  # fmt: skip
    return {
        "apiVersion": "gpuflow.dev/v1alpha1",
        "kind": "DLJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "gpus": 2,
            "model": "mlp",
            "batchSize": 64,
            "expectedDurationSeconds": duration_s,
            "backoffLimit": 2,
            "checkpoint": {"path": f"/ckpt/{name}", "gracePeriodSeconds": 20},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "worker",
                            "image": "gpuflow-train",
                            "command": command,
                            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                        }
                    ],
                    "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
                }
            },
        },
    }


@pytest.fixture
def sandbox(tmp_path: Path, request: Any) -> Iterator[Sandbox]:
    policy, gpus, *opts = getattr(request, "param", ("fifo", 2))
    options = tuple(("", k, v) for k, v in (opts[0] if opts else {}).items())
    config = SandboxConfig(
        nodes=1, gpus_per_node=gpus, policy=policy, directory=tmp_path, policy_options=options
    )
    with Sandbox(config) as sb:
        yield sb


def status(sb: Sandbox, name: str) -> dict[str, Any]:
    return dict(sb.api.get_dljob("default", name).get("status") or {})


def logs(sb: Sandbox, name: str) -> dict[int, str]:
    """The worker log of each attempt of a job (pod <job>-<attempt>-0)."""
    out = {}
    for path in (sb.directory / "pods").glob(f"default_{name}-*-0_*/worker.log"):
        attempt = int(path.parent.name.split("_")[1].split("-")[-2])
        out[attempt] = path.read_text(errors="replace")
    return out


def steps_logged(text: str) -> list[int]:
    return [int(m.group(1)) for m in STEP_LOG.finditer(text)]


@pytest.mark.parametrize("sandbox", [("srtf", 2)], indirect=True)
def test_a_preempted_job_checkpoints_on_sigterm_and_resumes_where_it_stopped(
    sandbox: Sandbox,
) -> None:
    sb = sandbox
    sb.api.create_dljob("default", example_job("long", steps=600, duration_s=600.0))
    wait_for("long to train", lambda: len(steps_logged(logs(sb, "long").get(1, ""))) >= 3, 90)
    # A much shorter job: SRTF takes the GPUs back for it.
    sb.api.create_dljob("default", example_job("short", steps=30, duration_s=5.0, sleep_s=0))
    wait_for("short to finish", lambda: status(sb, "short").get("phase") == "Succeeded", 90)
    wait_for("long to finish", lambda: status(sb, "long").get("phase") == "Succeeded", 180)

    first, second = logs(sb, "long")[1], logs(sb, "long")[2]
    stopped = re.search(r"stopping at step (\d+) on SIGTERM \(exit 75\)", first)
    resumed = re.search(r"resumed from .* at step (\d+)", second)
    assert stopped and resumed, (first[-2000:], second[-2000:])
    # Nothing lost beyond the checkpoint taken at SIGTERM: it resumes at that step,
    # and every step it logs afterwards is later.
    assert int(resumed.group(1)) == int(stopped.group(1)) > 0
    assert min(steps_logged(second)) > int(stopped.group(1))
    assert max(steps_logged(second)) == 600
    final = status(sb, "long")
    assert final["restarts"] == 1 and not final.get("failures")
    conditions = {c["type"]: c for c in final["conditions"]}
    assert (
        conditions["Preempted"]["reason"] == "PreemptedBySrtf"
        or "srtf" in (conditions["Preempted"]["message"])
    )


def test_a_killed_worker_restarts_once_from_its_checkpoint(sandbox: Sandbox) -> None:
    sb = sandbox
    assert sb.operator is not None
    sb.operator.backend.lifecycle.restart = RestartPolicy(base_s=1.0, cap_s=1.0)
    sb.api.create_dljob("default", example_job("victim", steps=400, duration_s=60.0))
    wait_for("a checkpoint", lambda: "checkpoint at step" in logs(sb, "victim").get(1, ""), 90)
    pids = wait_for("the worker", lambda: sb.kubelets[0].processes().get("victim-1-0"))
    os.kill(pids, signal.SIGKILL)
    wait_for("victim to finish", lambda: status(sb, "victim").get("phase") == "Succeeded", 180)

    first, second = logs(sb, "victim")[1], logs(sb, "victim")[2]
    saved = [int(s) for s in re.findall(r"checkpoint at step (\d+)", first)]
    resumed = re.search(r"resumed from .* at step (\d+)", second)
    assert resumed and int(resumed.group(1)) == max(saved)  # the last checkpoint
    final = status(sb, "victim")
    assert final["failures"] == 1 and final["restarts"] == 1
    events = sb.api.core.list_namespaced_event("default").items
    failed = [
        e for e in events if e.involved_object.name == "victim" and e.reason == "WorkerFailed"
    ]
    assert len(failed) == 1 and "137" in failed[0].message + str(final.get("message"))


LOG_LINE = re.compile(r"^(\S+ \S+) \S+ step (\d+) loss [0-9.]+ batch (\d+)$", re.MULTILINE)


def step_rate_from_log(text: str, batch: int) -> float:
    """Steps per second over the last 8 windows the process logged at `batch` (its
    own clock, independent of its reports; the API averages the same 8 windows)."""
    points = [
        (time.mktime(time.strptime(ts.split(",")[0], "%Y-%m-%d %H:%M:%S")) + int(ts[-3:]) / 1e3,
         int(step))
        for ts, step, b in LOG_LINE.findall(text)
        if int(b) == batch
    ]  # fmt: skip
    (t0, s0), (t1, s1) = points[-9], points[-1]
    return (s1 - s0) / (t1 - t0)


# Pollux re-allocates every 10 s here (the paper's 60 s would leave the test two rounds
# while the jobs run), and adopts any better batch (batch_margin 0: the test is on what
# the processes measure, not on the hysteresis): the operator's --policy-opt.
# Measured on real processes sharing 2 cores with the rest of the run: one rerun when
# a burst of load moves a process's speed past the tolerance (both tries must miss).
@pytest.mark.flaky(reruns=1)
@pytest.mark.parametrize(
    "sandbox", [("pollux", 4, {"interval_s": 10.0, "batch_margin": 0.0})], indirect=True
)
def test_pollux_decides_on_what_the_processes_measure(sandbox: Sandbox) -> None:
    sb = sandbox
    assert sb.operator is not None
    names = ["p0", "p1", "p2"]
    for name in names:
        # Noisy labels: the gradient noise the jobs measure is worth a larger batch
        # than the profile's early figures that Pollux starts them with. A slow
        # learning rate keeps |G|^2 well above its estimate's noise: near the optimum the
        # smoothed estimate crosses zero, the statistics are unusable and Pollux falls
        # back to the profile (batch 128 for 2,000 steps in a CI run under load).
        body = example_job(name, steps=40_000, duration_s=600.0, sleep_s=0.01, noise_std=10.0)
        body["spec"].update({"gpus": 1, "model": "cifar10"})  # a profiled application
        command = body["spec"]["template"]["spec"]["containers"][0]["command"]
        command[:] = ["--lr=0.005" if c.startswith("--lr=") else c for c in command]
        sb.api.create_dljob("default", body)

    def measured_views() -> list[Any]:
        snap = sb.operator.backend.last_snapshot if sb.operator else None
        views = [j for j in (snap.jobs if snap else ()) if j.rate_source == "measured"]
        return views if len(views) == len(names) else []

    # Each job's view holds the speed its process measured (within 20 %): the rate in
    # the view against the steps per second the process logged on its own clock.
    wait_for("three measured views", measured_views, 120)
    for name in names:

        def compared(name: str = name) -> tuple[float, float] | None:
            views = [v for v in measured_views() if v.job_id == f"default/{name}"]
            if not views or views[0].measured is None or not views[0].measured.batch_size:
                return None
            batch, text = views[0].measured.batch_size, logs(sb, name)[1]
            if sum(int(b) == batch for *_, b in LOG_LINE.findall(text)) < 10:
                return None
            return views[0].rate_ips, step_rate_from_log(text, batch)

        seen, logged = wait_for(f"{name}'s windows", compared, 60)
        assert seen == pytest.approx(logged, rel=0.2), name

    # Pollux moves a batch size on the jobs' own gradient statistics; the process
    # adopts it between steps, without a restart: one attempt's log holds more than one
    # batch size. Read from the logs, which keep every size a process ran at: with no
    # hysteresis here Pollux may move a batch and move it back (128 -> 224 -> 128 within
    # 20 s was seen) before the windows above fill. Any attempt counts: Pollux may first
    # give a job a second GPU (a restart) and move its batch in the new process.
    def batches(name: str) -> dict[int, set[int]]:
        return {a: {int(b) for *_, b in LOG_LINE.findall(t)} for a, t in logs(sb, name).items()}

    def rebatched() -> list[tuple[str, int]]:
        return [(n, a) for n in names for a, sizes in batches(n).items() if len(sizes) > 1]

    try:
        changed, attempt = wait_for("a new batch size", rebatched, 150)[0]
    except AssertionError as e:  # say where each job was: phase, attempt, sizes run at
        seen = {n: (status(sb, n).get("phase"), status(sb, n).get("attempt"), batches(n))
                for n in names}  # fmt: skip
        raise AssertionError(f"{e}; jobs: {seen}") from None
    assert status(sb, changed)["attempt"] >= attempt  # the log is of a pod of this job

    def adopted() -> bool:  # the operator's latest choice is one the process runs at
        st = status(sb, changed)
        return int(st["batchSize"]) in batches(changed).get(st["attempt"], set())

    wait_for("the operator's batch size in the log", adopted, 30)
    events = sb.api.core.list_namespaced_event("default").items
    assert any(e.involved_object.name == changed and e.reason == "Rebatched" for e in events)


# Optimus refits every second here (5 s by default): the test judges the fit, and a
# job of a minute leaves few 5-s refits before half-way.
# Measured on real processes sharing 2 cores with the rest of the run: one rerun when
# a burst of load moves a process's speed past the tolerance (both tries must miss).
@pytest.mark.flaky(reruns=1)
@pytest.mark.parametrize("sandbox", [("optimus", 2, {"refit_s": 1.0})], indirect=True)
def test_optimus_predicts_the_remaining_time_from_the_losses_a_job_reports(
    sandbox: Sandbox,
) -> None:
    """The example stops at its own convergence test (its loss falls by less than
    Optimus's threshold an epoch) with a 1/t learning-rate schedule; by half-way,
    Optimus's remaining time, fitted to the losses the process reported, is within
    25 % of the truth (the median of its estimates between 45 and 55 % of the run).
    Compared in steps (remaining time = remaining steps / speed,
    and the speed is the process's own measurement, which CPU contention on a shared
    test machine moves more than the estimate); the time figures are printed."""
    sb = sandbox
    assert sb.operator is not None
    policy = sb.operator.controller.policy
    delta = policy.convergence_threshold  # type: ignore[attr-defined]
    body = example_job("conv", steps=100_000, duration_s=60.0, sleep_s=0.01)
    body["spec"]["template"]["spec"]["containers"][0]["command"] += [
        "--model=linear", "--momentum=0", "--lr=0.005", "--lr-decay-steps=50",
        "--epoch-samples=3200", f"--until-converged={delta}", "--report-interval-s=0.25",
    ]  # fmt: skip
    sb.api.create_dljob("default", body)
    estimates: list[tuple[float, int, float, float]] = []  # (time, step, steps left, rate)
    while status(sb, "conv").get("phase") != "Succeeded":
        assert len(estimates) < 5000, "the job did not converge"
        time.sleep(0.1)
        state, snap = sb.operator.controller.state, sb.operator.backend.last_snapshot
        views = [j for j in (snap.jobs if snap else ()) if j.rate_source == "measured"]
        memory = getattr(state, "jobs", {}).get("default/conv")
        if not views or memory is None or memory.curve is None:
            continue
        view = views[0]
        total = memory.curve.converged_epoch(delta) * memory.iters_per_epoch
        step = view.done_iters_at(time.time())
        estimates.append((time.time(), int(step), max(0.0, total - step), view.rate_ips))
    text = logs(sb, "conv")[1]
    last = LOG_LINE.findall(text)[-1]
    end_s = time.mktime(time.strptime(last[0].split(",")[0], "%Y-%m-%d %H:%M:%S"))
    end_s += int(last[0][-3:]) / 1e3
    final_step = int(last[1])
    assert final_step < 100_000  # it stopped on its own test
    # Optimus's estimate around half-way (45-55 % of the run), its median: one round's
    # fit moves with the few newest losses; the test is on what Optimus holds then.
    around = [e for e in estimates if 0.45 <= e[1] / final_step <= 0.55]
    assert len(around) >= 3, "too few estimates around half-way"
    at, step, left, rate = sorted(around, key=lambda e: e[2] + e[1])[len(around) // 2]
    print(f"half-way: predicted {left / rate:.1f} s left, ran {end_s - at:.1f} s more")
    assert left == pytest.approx(final_step - step, rel=0.25), (step, final_step, left)
