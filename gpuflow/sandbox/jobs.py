"""The DLJobs a sandbox runs: job files in, waiting for them, results out.

Called by `gpuflow sandbox run` (gpuflow/sandbox_cmd.py) on a `Sandbox`
(gpuflow/sandbox/cluster.py): `load_jobs` reads the DLJobs of YAML files,
`run_jobs` creates them and waits until each has ended, and `job_results` is the
JSON that `sandbox run --json` prints, with `train_figures` read from each job's
`status.train` (which the gpuflow service writes from the jobs' reports).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from gpuflow.sandbox.cluster import Sandbox, SandboxError
from operators import crd
from operators.dljobs.resources import TERMINAL_PHASES, metrics_secret_name
from operators.kube import KubeApi

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SECRET_TIMEOUT_S = 15.0  # the service adopting a new DLJob (its metrics Secret)
SUMMARY_SLACK_S = 0.5  # past the summary interval: the service's writer thread and write


def load_jobs(paths: list[str]) -> list[Obj]:
    """The DLJobs of YAML files (several documents each allowed); SandboxError naming
    the file for a missing file, bad YAML, or a document that is not a DLJob."""
    jobs: list[Obj] = []
    for path in paths:
        try:
            docs = list(yaml.safe_load_all(Path(path).read_text(encoding="utf-8")))
        except OSError as exc:
            raise SandboxError(f"{path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise SandboxError(f"{path}: bad YAML: {' '.join(str(exc).split())}") from None
        for doc in docs:
            if doc is None:
                continue
            if not isinstance(doc, dict) or doc.get("kind") != crd.KIND:
                raise SandboxError(f"{path}: expected {crd.KIND} documents")
            if not (doc.get("metadata") or {}).get("name"):
                raise SandboxError(f"{path}: a {crd.KIND} without metadata.name")
            jobs.append(doc)
    if not jobs:
        raise SandboxError("no DLJob in " + ", ".join(paths))
    return jobs


def run_jobs(sandbox: Sandbox, jobs: list[Obj], timeout_s: float) -> tuple[list[Obj], bool]:
    """Create the DLJobs and wait until each is Succeeded or Failed: their final
    objects, and False if the timeout came first.

    A sandbox configured without its operator gets it once the service has made each
    job's metrics Secret (bounded by SECRET_TIMEOUT_S), so that no worker starts
    without its token. Once all have ended, one summary interval more (and a little
    slack) lets the service's trailing write of each job's last reports land before
    the jobs are read: those reports arrived before the job ended, and the service
    writes the last of a burst at most one interval after it."""
    api = sandbox.api
    for job in jobs:
        api.create_dljob((job.get("metadata") or {}).get("namespace", "default"), job)
    keys = [(j["metadata"].get("namespace", "default"), j["metadata"]["name"]) for j in jobs]
    _wait_secrets(api, keys)
    sandbox.start_operator()
    deadline = time.monotonic() + timeout_s
    while True:
        current = [api.get_dljob(ns, name) for ns, name in keys]
        done = all((j.get("status") or {}).get("phase") in TERMINAL_PHASES for j in current)
        if not done and time.monotonic() <= deadline:
            time.sleep(0.2)
            continue
        if done:
            time.sleep(sandbox.config.train_summary_interval_s + SUMMARY_SLACK_S)
            current = [api.get_dljob(ns, name) for ns, name in keys]
        return current, done


def _wait_secrets(api: KubeApi, keys: list[tuple[str, str]]) -> None:
    deadline = time.monotonic() + SECRET_TIMEOUT_S
    missing = list(keys)
    while missing:
        missing = [
            (ns, n) for ns, n in missing if api.get_secret(ns, metrics_secret_name(n)) is None
        ]
        if missing and time.monotonic() > deadline:
            names = ", ".join(n for _, n in missing)
            log.warning(
                "no metrics Secret after %.0f s: %s report nothing", SECRET_TIMEOUT_S, names
            )
            return
        if missing:
            time.sleep(0.05)


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def train_figures(train: Obj) -> tuple[int | None, list[int], float | None]:
    """From a DLJob's `status.train` ({} if never written): the last step reported,
    the batch sizes the job ran at (those of `throughput` and the current one,
    increasing) and its last measured steps/s (samplesPerSecond / batchSize)."""
    step = train.get("step")
    sizes = {int(e["batchSize"]) for e in train.get("throughput") or [] if "batchSize" in e}
    batch = train.get("batchSize")
    if batch is not None:
        sizes.add(int(batch))
    rate = train.get("samplesPerSecond")
    steps_per_s = float(rate) / int(batch) if rate is not None and batch else None
    return (int(step) if step is not None else None), sorted(sizes), steps_per_s


def job_results(jobs: list[Obj]) -> list[Obj]:
    """One `sandbox run --json` entry per DLJob; `steps`, `batch_sizes` and
    `measured_rate_ips` from `status.train` (null and [] if the job never reported)."""
    out = []
    for job in jobs:
        status = job.get("status") or {}
        steps, sizes, rate = train_figures(status.get("train") or {})
        created = _parse_time(job["metadata"].get("creationTimestamp"))
        completed = _parse_time(status.get("completionTime"))
        jct = (completed - created).total_seconds() if created and completed else None
        out.append(
            {
                "name": job["metadata"]["name"],
                "status": status.get("phase"),
                "restarts": int(status.get("restarts") or 0),
                "steps": steps,
                "batch_sizes": sizes,
                "measured_rate_ips": rate,
                "jct_s": jct,
            }
        )
    return out
