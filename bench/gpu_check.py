"""The GPU check anyone with an NVIDIA GPU can run (issue 27, item 6): what gpuflow
believes about the GPU against what the GPU does, printed as one table.

    .venv/bin/python -m bench.gpu_check                  # on a GPU machine (pynvml, CUDA)
    .venv/bin/python -m bench.gpu_check --fake-nvml      # anywhere: what it would print
    ... --json                                           # one JSON object instead

Three parts, in order:

1. discovery: the node agent's `discover` and `gpu_status` (operators/agent/discovery.py)
   on NVML, and the Node annotation `gpuflow.dev/gpus` it would publish (model, memory,
   speed, links; the GPU catalogue's entry for NVML's product name, or a derived speed
   and the reason). `--fake-nvml` reads tests/operators/fake_nvml.py instead, named as
   an H200 with the memory the H200 session measured (the fake's topology is its
   DGX-1's: 8 GPUs in a hybrid cube-mesh; a real HGX H200 has NVSwitches).
2. train: the example job (examples/train) under `gpuflow.train` for --train-steps,
   SIGTERM (expect exit 75 and a checkpoint at the step it stopped), then resumed as
   attempt 2 for --resume-steps more (expect exit 0, "resumed at" that step, a final
   checkpoint at the sum). On CUDA where torch sees it, else on the CPU (the output
   says which).
3. co-location: two copies of a model alone and together, time-sliced and under MPS
   (an MPS control daemon of its own, `nvidia-cuda-mps-control -d`), by
   bench/sharing_worker.py's method (the H200 session's), each process's slowdown
   beside `gpuflow colocate`'s prediction from the utilisation and memory measured
   alone. With no CUDA, or with --fake-nvml, nothing is measured: the prediction is
   printed beside the shipped H200 rows
   (controller/model/profiles/h200-sharing/measurements.csv), marked as such.

Runs from a checkout's root, as the other benches: it reuses the tests' NVML fake and
the H200 rows' reader (tests/operators/fake_nvml.py, tests/h200_sharing.py). A GPU run
takes about three minutes with the default 5 s windows (docs/gpu-check.md).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.model.catalog import resolve
from controller.model.sharing import SharingMode
from gpuflow.colocate_cmd import predict
from gpuflow.options import CliError
from gpuflow.train import checkpoint
from gpuflow.train.preemption import EXIT_CHECKPOINTED
from operators.agent.discovery import discover, gpu_status
from operators.nodes import DEFAULT_NIC_GBPS, MIN_MEASURED_UTIL

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
# The H200 of the session measured (controller/model/profiles/h200-sharing/README.md):
# NVML's product name and the memory it reported.
FAKE_PRODUCT = "NVIDIA H200"
FAKE_MEM_MIB = 143_771
RECORDED_SOURCE = "controller/model/profiles/h200-sharing/measurements.csv"
# The batches of the H200 session's rows, so that a GPU run compares with them.
BATCHES = {"resnet50": 128, "transformer": 32, "mlp": 64}
MPS_CONTROL = "nvidia-cuda-mps-control"
STEP_LINE = re.compile(r"step (\d+) loss ([0-9.]+)")
RESUMED_LINE = re.compile(r"resumed from \S+ at step (\d+)")
# Worker processes: a torch import and a CUDA context take seconds, a busy machine more.
WORKER_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Options:
    fake_nvml: bool
    json: bool
    train_steps: int
    resume_steps: int
    window_s: float
    models: tuple[str, ...]
    nic_gbps: float


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--fake-nvml", action="store_true", help="tests/operators/fake_nvml.py")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--train-steps", type=int, default=200, help="steps before SIGTERM")
    p.add_argument("--resume-steps", type=int, default=50, help="steps after resuming")
    p.add_argument("--window-s", type=float, default=5.0, help="timed window alone (pairs +1)")
    p.add_argument("--models", default="resnet50,transformer,mlp", help="pairs to measure")
    p.add_argument("--nic-gbps", type=float, default=DEFAULT_NIC_GBPS, help="as the agent's")
    a = p.parse_args(argv)
    models = tuple(m for m in a.models.split(",") if m)
    unknown = [m for m in models if m not in BATCHES]
    if unknown:
        p.error(f"--models: unknown {unknown[0]!r} (known: {', '.join(BATCHES)})")
    if a.train_steps < 1 or a.resume_steps < 1:
        p.error("--train-steps and --resume-steps: at least 1")
    if not 0 < a.window_s <= 600:
        p.error("--window-s: in (0, 600]")
    return Options(
        a.fake_nvml, a.json, a.train_steps, a.resume_steps, a.window_s, models, a.nic_gbps
    )


# -- 1. discovery ----------------------------------------------------------------------


def check_discovery(options: Options) -> dict[str, Any]:
    """The agent's discovery as it would publish it; raises CliError without NVML."""
    if options.fake_nvml:
        from tests.operators.fake_nvml import FakeNvml, GpuFigures

        nvml: Any = FakeNvml(
            product=FAKE_PRODUCT,
            figures=GpuFigures(compute_capability=(9, 0), mem_bytes=FAKE_MEM_MIB * MIB),
        )
        source = "fake (tests/operators/fake_nvml.py: its DGX-1 topology, named an H200)"
    else:
        try:
            import pynvml
        except ImportError:
            raise CliError(
                "pynvml is not installed (pip install nvidia-ml-py); or --fake-nvml"
            ) from None
        nvml = pynvml
        source = "real (pynvml)"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise CliError(f"NVML: {exc} (no NVIDIA driver here? try --fake-nvml)") from None
    try:
        info = discover(nvml, options.nic_gbps)
        status = gpu_status(nvml)
        if not info.gpus:
            raise CliError("NVML: the driver answers but reports no GPU")
        first = nvml.nvmlDeviceGetHandleByIndex(0)
        nvml_mem_mib = int(nvml.nvmlDeviceGetMemoryInfo(first).total) // MIB
    finally:
        nvml.nvmlShutdown()
    return {
        "nvml": source,
        "product": info.product,
        "nvml_mem_mib": nvml_mem_mib,
        "annotation": json.loads(info.to_annotation()),
        "labels": info.labels(),
        "unknown": info.unknown,
        "status": status,
    }


# -- 2. train, checkpoint, resume ------------------------------------------------------


def check_train(options: Options, workdir: Path) -> dict[str, Any]:
    """The example job stopped by SIGTERM and resumed (module docstring, part 2)."""
    ckpt = workdir / "ckpt"
    args = ["--report-interval-s", "0.05", "--checkpoint-interval-s", "3600"]
    first_log = workdir / "train-1.log"
    with _worker([*args, "--steps", "100000000"], ckpt, 1, first_log) as proc:
        reached = _wait_for_step(proc, first_log, options.train_steps)
        proc.send_signal(signal.SIGTERM)
        stop_exit = proc.wait(timeout=WORKER_TIMEOUT_S)
    saved = _checkpoint(ckpt, 1, stop_exit, first_log)
    stopped_at = int(saved["train"]["step"])
    end = stopped_at + options.resume_steps
    second_log = workdir / "train-2.log"
    with _worker([*args, "--steps", str(end)], ckpt, 2, second_log) as proc:
        resume_exit = proc.wait(timeout=WORKER_TIMEOUT_S)
    final = _checkpoint(ckpt, 2, resume_exit, second_log)
    text = second_log.read_text()
    resumed = RESUMED_LINE.search(text)
    first_losses = [float(m[2]) for m in STEP_LINE.finditer(first_log.read_text())]
    later_losses = [float(m[2]) for m in STEP_LINE.finditer(text)]
    out = {
        "device": "cuda" if "cuda" in saved["rng"] else "cpu",
        "stop_requested_after_step": reached,
        "stop_exit": stop_exit,
        "checkpoint_step": stopped_at,
        "resumed_at": int(resumed[1]) if resumed else None,
        "resume_exit": resume_exit,
        "final_step": int(final["train"]["step"]),
        "first_loss": first_losses[0] if first_losses else None,
        "resumed_loss": later_losses[0] if later_losses else None,
    }
    out["ok"] = (
        stop_exit == EXIT_CHECKPOINTED
        and stopped_at >= reached
        and out["resumed_at"] == stopped_at
        and resume_exit == 0
        and out["final_step"] == end
        and bool(first_losses and later_losses and later_losses[0] < first_losses[0])
    )
    return out


def _checkpoint(ckpt: Path, attempt: int, exit_code: int, log: Path) -> dict[str, Any]:
    """The checkpoint attempt `attempt` wrote; CliError with its log's end if none."""
    import torch

    path = checkpoint.checkpoint_file(ckpt, attempt)
    if not path.is_file():
        tail = log.read_text()[-400:]
        raise CliError(f"train: attempt {attempt} exited {exit_code} with no checkpoint: {tail!r}")
    payload: dict[str, Any] = torch.load(path, weights_only=True)
    return payload


@contextlib.contextmanager
def _worker(
    args: list[str], ckpt: Path, attempt: int, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLOW_")}
    env |= {
        "GPUFLOW_CHECKPOINT_PATH": str(ckpt),
        "GPUFLOW_ATTEMPT": str(attempt),
        "GPUFLOW_RESUME": "1" if attempt > 1 else "0",
    }
    cmd = [sys.executable, "-m", "examples.train.train", *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for_step(proc: subprocess.Popen[bytes], log: Path, step: int) -> int:
    """The first logged step at or past `step`; CliError if the job ends or stalls."""
    end = time.monotonic() + WORKER_TIMEOUT_S
    while time.monotonic() < end:
        steps = [int(m[1]) for m in STEP_LINE.finditer(log.read_text())]
        if steps and steps[-1] >= step:
            return steps[-1]
        if proc.poll() is not None:
            tail = log.read_text()[-400:]
            raise CliError(f"train: the example job exited {proc.returncode}: {tail}")
        time.sleep(0.05)
    raise CliError(f"train: step {step} not reached in {WORKER_TIMEOUT_S:g} s")


# -- 3. co-location --------------------------------------------------------------------


def predicted(product: str, mode: SharingMode, jobs: list[str]) -> list[float] | str:
    """`gpuflow colocate`'s slowdowns for `jobs` on `product`, or why there are none."""
    try:
        answer = predict(product, str(mode), jobs, None)
    except CliError as exc:
        return str(exc)
    return [float(j["slowdown"]) for j in answer.out["jobs"]]


def recorded_rows(models: tuple[str, ...]) -> list[dict[str, Any]]:
    """The prediction beside the H200 session's pairs of the same models."""
    from tests.h200_sharing import PAIRS

    rows = []
    for mode in SharingMode:
        for model in models:
            procs = [p for p in PAIRS if p.mode is mode and p.model == model]
            if not procs:
                continue
            own = procs[0]
            jobs = [
                f"{model}:util={own.util}:mem={own.mem_mib}",
                f"{model}:util={own.beside_util}:mem={own.beside_mem_mib}",
            ]
            rows.append(
                _row(
                    mode,
                    model,
                    own.util,
                    predicted(FAKE_PRODUCT, mode, jobs),
                    [p.slowdown for p in procs],
                    f"recorded on H200 ({RECORDED_SOURCE})",
                )
            )
    return rows


def measured_rows(product: str, options: Options, workdir: Path) -> list[dict[str, Any]]:
    """Each model alone, then two copies time-sliced and under MPS, measured here."""
    rows = []
    for model in options.models:
        batch = BATCHES[model]
        if model == "resnet50" and importlib.util.find_spec("torchvision") is None:
            rows.append(_skipped(model, "torchvision is not installed (pip install torchvision)"))
            continue
        _say(f"{model}: alone, {options.window_s:g} s")
        try:
            solo = _run_workers(model, batch, options.window_s, 1, workdir, Sharing({}))[0]
        except CliError as exc:
            rows.append(_skipped(model, str(exc)))
            continue
        job, util, said = _job_alone(model, batch, solo)
        agent = solo.get("process_sm_util_pct")
        agent_util = min(1.0, max(MIN_MEASURED_UTIL, agent / 100)) if agent is not None else None
        agent_job = f"{model}:batch={batch}:util={agent_util:.3f}" if agent_util else None
        if agent_job and solo["peak_mem_mib"]:
            agent_job += f":mem={solo['peak_mem_mib']}"
        for mode in SharingMode:
            window = options.window_s + 1
            _say(f"{model}: two, {mode}, {window:g} s")
            try:
                with _sharing(mode, workdir) as sharing:
                    pair = _run_workers(model, batch, window, 2, workdir, sharing)
            except CliError as exc:
                rows.append(_skipped(model, str(exc), mode))
                continue
            slowdowns = [solo["iters_per_s"] / p["iters_per_s"] for p in pair]
            source = f"measured here ({solo['iters_per_s']:.1f} it/s alone{said})"
            row = _row(mode, model, util, predicted(product, mode, [job, job]), slowdowns, source)
            if agent_job and agent_util:
                row["agent_util"] = round(agent_util, 3)
                by_agent = predicted(product, mode, [agent_job, agent_job])
                row["predicted_agent"] = by_agent[0] if isinstance(by_agent, list) else None
            rows.append(row)
    return rows


def _job_alone(model: str, batch: int, solo: dict[str, Any]) -> tuple[str, float, str]:
    """The `gpuflow colocate` JOB for a model measured alone, its utilisation, and
    what the row should say of it: the utilisation NVML measured (at least
    MIN_MEASURED_UTIL, as the operator takes a pod's), else the catalogue's."""
    mem = f"mem={solo['peak_mem_mib']}" if solo["peak_mem_mib"] else ""
    if solo["util_pct"] is None:
        parts = [model, f"batch={batch}", mem]
        return (
            ":".join(p for p in parts if p),
            resolve(model).gpu_util,
            "; no NVML figure: util the catalogue's",
        )
    util = min(1.0, max(MIN_MEASURED_UTIL, solo["util_pct"] / 100))
    parts = [model, f"batch={batch}", f"util={util:.3f}", mem]
    return ":".join(p for p in parts if p), util, ""


def _row(
    mode: SharingMode,
    model: str,
    util: float,
    prediction: list[float] | str,
    measured: list[float],
    source: str,
) -> dict[str, Any]:
    mean = sum(measured) / len(measured)
    model_s = prediction[0] if isinstance(prediction, list) else None
    return {
        "sharing": str(mode),
        "model": model,
        "util": round(util, 3),
        "predicted": model_s,
        "measured": [round(m, 3) for m in measured],
        "error_pct": round((model_s / mean - 1) * 100, 1) if model_s else None,
        "agent_util": None,  # the SM utilisation the node agent would read, where measured
        "predicted_agent": None,  # the prediction from it
        "source": source if model_s else f"{source}; no prediction: {prediction}",
    }


def _skipped(model: str, why: str, mode: SharingMode | None = None) -> dict[str, Any]:
    return {
        "sharing": str(mode) if mode else "-",
        "model": model,
        "util": None,
        "predicted": None,
        "measured": [],
        "error_pct": None,
        "agent_util": None,
        "predicted_agent": None,
        "source": f"skipped: {why}",
    }


@dataclass
class Sharing:
    """How a pair's clients share the GPU: their extra environment, and for MPS what
    the control daemon said while they were in their timed window."""

    env: dict[str, str]
    mps_env: dict[str, str] | None = None
    servers: str | None = None

    def in_window(self) -> None:
        if self.mps_env is not None:
            self.servers = _mps_command("get_server_list", self.mps_env)


@contextlib.contextmanager
def _sharing(mode: SharingMode, workdir: Path) -> Iterator[Sharing]:
    """Nothing for time-slicing; for MPS, a control daemon of the check's own (its
    pipe and log folders under `workdir`), quit afterwards, and a CliError if it ran
    no MPS server while the pair was in its window (the clients did not use MPS)."""
    if mode is SharingMode.TIME_SLICING:
        yield Sharing({})
        return
    pipe, logs = workdir / "mps-pipe", workdir / "mps-log"
    pipe.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
    full = os.environ | env
    try:
        subprocess.run([MPS_CONTROL, "-d"], env=full, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CliError(f"MPS: {MPS_CONTROL} -d failed ({exc})") from None
    sharing = Sharing(env, full)
    try:
        yield sharing
        if not (sharing.servers or "").strip():
            raise CliError(f"MPS: no MPS server ran during the pair (see {logs}/control.log)")
    finally:
        _mps_command("quit", full)


def _mps_command(command: str, env: dict[str, str]) -> str:
    try:
        done = subprocess.run(
            [MPS_CONTROL], input=command + "\n", env=env, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout


def _run_workers(
    model: str, batch: int, window_s: float, n: int, workdir: Path, sharing: Sharing
) -> list[dict[str, Any]]:
    """`n` bench/sharing_worker.py processes started together; their JSON lines.
    `sharing.in_window` is called once all of them have started their window."""
    barrier = Path(tempfile.mkdtemp(prefix="barrier-", dir=workdir))
    cmd = [sys.executable, "-m", "bench.sharing_worker", model, str(batch), str(window_s)]
    cmd += ["--barrier", str(barrier), "--nproc", str(n)]
    # NVML numbers GPUs by PCI bus; CUDA fastest first unless told otherwise.
    env = os.environ | {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} | sharing.env
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(n)
    ]
    outs = []
    try:
        _wait_ready(barrier, procs)
        sharing.in_window()
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=WORKER_TIMEOUT_S)
            if proc.returncode != 0:
                raise CliError(f"{model}: worker exited {proc.returncode}: {stderr[-300:]!r}")
            outs.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    return outs


def _wait_ready(barrier: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every worker has written its ready file, or one has ended (its exit is
    read afterwards), or the worker timeout passes."""
    end = time.monotonic() + WORKER_TIMEOUT_S
    while time.monotonic() < end and any(p.poll() is None for p in procs):
        if sum(1 for f in barrier.iterdir() if f.name.startswith("ready-")) >= len(procs):
            return
        time.sleep(0.05)


# -- the whole check -------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        names = re.findall(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        cpu = names[0] if names else cpu
    cuda = torch.cuda.is_available()
    return {
        "cpu": f"{cpu}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_device": torch.cuda.get_device_name(0) if cuda else None,
    }


def run_check(options: Options) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine()}
    report["discovery"] = check_discovery(options)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        _say(f"train: {options.train_steps} steps, SIGTERM, resume")
        report["train"] = check_train(options, Path(tmp))
        if options.fake_nvml or report["machine"]["cuda_device"] is None:
            report["colocation_mode"] = "recorded (no CUDA or --fake-nvml: nothing measured)"
            report["colocation"] = recorded_rows(options.models)
        else:
            report["colocation_mode"] = "measured here"
            product = report["discovery"]["product"]
            report["colocation"] = measured_rows(product, options, Path(tmp))
    return report


def table(report: dict[str, Any]) -> str:
    m, d, t = report["machine"], report["discovery"], report["train"]
    ann = d["annotation"]
    lines = [
        f"machine   {m['cpu']}; Python {m['python']}, torch {m['torch']}; "
        f"CUDA {m['cuda_device'] or 'none'}",
        f"NVML      {d['nvml']}",
        "",
        f"{'part':<10} {'item':<22} value",
        f"{'discover':<10} {'product':<22} {d['product']}",
        f"{'discover':<10} {'model':<22} {ann['model']}",
        f"{'discover':<10} {'memory':<22} {ann['memMib']} MiB published, "
        f"{d['nvml_mem_mib']} MiB NVML's total",
        f"{'discover':<10} {'speed':<22} {ann['speed']:g}",
        f"{'discover':<10} {'links':<22} PCIe {ann['pcieGbps']:g} Gbit/s, "
        f"NVLink {ann['nvlinkGbps']:g} Gbit/s a lane, NIC {ann['nicGbps']:g} Gbit/s",
        f"{'discover':<10} {'gpus':<22} {len(ann['gpus'])} ({ann['topology'][0]} ...)",
        f"{'discover':<10} {'sharing':<22} {ann['sharing']}",
        f"{'discover':<10} {'catalogue':<22} {d['unknown'] or 'known (the catalogue entry)'}",
        f"{'discover':<10} {'health':<22} "
        + ", ".join(
            f"{s.get('utilPct', '-')}%" if s["healthy"] else "UNHEALTHY" for s in d["status"]
        ),
        f"{'discover':<10} {'annotation':<22} {json.dumps(ann, separators=(',', ':'))}",
        f"{'train':<10} {'device':<22} "
        + ("cuda" if t["device"] == "cuda" else "cpu (no CUDA: the CPU run)"),
        f"{'train':<10} {'SIGTERM':<22} once step {t['stop_requested_after_step']} was logged: "
        f"exit {t['stop_exit']}, checkpoint at step {t['checkpoint_step']}",
        f"{'train':<10} {'resume':<22} at step {t['resumed_at']}: exit {t['resume_exit']}, "
        f"final step {t['final_step']}; loss {t['first_loss']} first, {t['resumed_loss']} "
        f"resumed",
        f"{'train':<10} {'result':<22} {'ok' if t['ok'] else 'FAILED'}",
        "",
        f"co-location: {report['colocation_mode']}",
        "(slowdown: time per step beside the other over alone; util: NVML utilization.gpu "
        "alone, what the prediction uses;",
        " agent u: the process's SM utilisation alone as the node agent reads it, pred(u): "
        "the prediction from it)",
        f"{'sharing':<13} {'model':<12} {'util':>5} {'predicted':>9} {'measured':>14} "
        f"{'error':>7} {'agent u':>7} {'pred(u)':>7}  source",
    ]
    for r in report["colocation"]:
        util = f"{r['util']:.3f}" if r["util"] is not None else "-"
        pred = f"{r['predicted']:.3f}" if r["predicted"] is not None else "-"
        meas = ", ".join(f"{v:.3f}" for v in r["measured"]) or "-"
        err = f"{r['error_pct']:+.1f}%" if r["error_pct"] is not None else "-"
        agent = f"{r['agent_util']:.3f}" if r["agent_util"] is not None else "-"
        by_agent = f"{r['predicted_agent']:.3f}" if r["predicted_agent"] is not None else "-"
        lines.append(
            f"{r['sharing']:<13} {r['model']:<12} {util:>5} {pred:>9} {meas:>14} {err:>7} "
            f"{agent:>7} {by_agent:>7}  {r['source']}"
        )
    return "\n".join(lines) + "\n"


def _say(text: str) -> None:
    """Progress on stderr: a GPU run is silent for minutes otherwise."""
    sys.stderr.write(f"gpu_check: {text}\n")


def _health(status: list[dict[str, Any]]) -> str:
    return ", ".join(f"{s['utilPct']}%" if s["healthy"] else "UNHEALTHY" for s in status)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    try:
        report = run_check(options)
    except CliError as exc:
        sys.stderr.write(f"gpu_check: {exc}\n")
        return 2
    sys.stdout.write(json.dumps(report) + "\n" if options.json else table(report))
    return 0 if report["train"]["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
