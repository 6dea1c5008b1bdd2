"""The metrics path in `gpuflow sandbox run`: a worker POSTs reports to the gpuflow
service the sandbox runs (GPUFLOW_API_URL, GPUFLOW_JOB_ID, GPUFLOW_METRICS_TOKEN from
the operator), the service writes them into the DLJob's status.train, and the JSON
shows the figures."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

from tests.sandbox.test_cmd import dljob, run

# Two reports, as a job that changed its batch size between them would send: steps
# 1-2 at batch 64 (two windows of 320 samples/s), steps 3-4 at batch 128 (448 then
# 512). Two POSTs: the second lands in the service's trailing write, after the first.
REPORTER = """
import json, os, urllib.request
def post(metrics):
    req = urllib.request.Request(
        os.environ["GPUFLOW_API_URL"] + "/jobs/" + os.environ["GPUFLOW_JOB_ID"] + "/metrics",
        data=json.dumps({"metrics": metrics}).encode(),
        headers={"Content-Type": "application/json",
                 "X-Job-Token": os.environ["GPUFLOW_METRICS_TOKEN"]},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201, resp.status
def m(name, value, step):
    return {"name": name, "value": value, "step": step}
post([m("gpus", 2, 1), m("batch_size", 64, 1)]
     + [m(n, v, s) for s in (1, 2) for n, v in
        (("samples_per_s", 320.0), ("step_time_s", 0.2), ("loss", 1.0 / s))])
post([m("batch_size", 128, 3)]
     + [m(n, v, s) for s, r in ((3, 448.0), (4, 512.0)) for n, v in
        (("samples_per_s", r), ("step_time_s", 128 / r), ("loss", 1.0 / s))])
"""


def test_run_json_reports_what_the_worker_posted(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump_all([dljob("reporter", REPORTER, 2), dljob("quiet", "pass", 1)]))
    proc = run(["--nodes", "1x2", "--json", str(job), "--timeout", "40"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    by_name = {j["name"]: j for j in json.loads(proc.stdout)["jobs"]}
    reporter = by_name["reporter"]
    assert reporter["status"] == "Succeeded"
    assert (reporter["steps"], reporter["batch_sizes"]) == (4, [64, 128])
    assert reporter["measured_rate_ips"] == 512.0 / 128  # the last window's steps/s
    quiet = by_name["quiet"]
    assert (quiet["status"], quiet["steps"], quiet["batch_sizes"]) == ("Succeeded", None, [])
    assert quiet["measured_rate_ips"] is None


def test_service_is_stopped_with_the_sandbox(tmp_path: Path) -> None:
    """`--dir` keeps the service's log and database; its process is gone after `run`."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(dljob("j", "pass", 1)))
    keep = tmp_path / "sb"
    proc = run(["--nodes", "1x1", "--json", "--dir", str(keep), str(job)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (keep / "api" / "gpuflow.db").is_file()
    log = (keep / "api.log").read_text()
    listening = re.search(r"Uvicorn running on http://([\d.]+):(\d+)", log)
    assert listening and "Finished server process" in log  # it shut down on SIGTERM
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"serve --host {listening[1]} --port {listening[2]}" not in ps
