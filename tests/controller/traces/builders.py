"""Builders for trace-file fixtures: small files in each format, written to tmp_path."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path


def write(directory: Path, name: str, text: str) -> Path:
    """Write `text` (dedented, leading newline dropped) to `directory / name`."""
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def philly_attempt(start: str | None, end: str | None, *gpus_per_server: int) -> dict[str, object]:
    """One `cluster_job_log` attempt; each number is the GPU count on one server."""
    detail = [
        {"ip": f"m{i}", "gpus": [f"gpu{g}" for g in range(count)]}
        for i, count in enumerate(gpus_per_server)
    ]
    return {"start_time": start, "end_time": end, "detail": detail}


def philly_job(
    jobid: str,
    submitted: str,
    *attempts: dict[str, object],
    vc: str = "vc1",
    user: str = "u1",
    status: str = "Pass",
) -> dict[str, object]:
    return {
        "status": status,
        "vc": vc,
        "jobid": jobid,
        "attempts": list(attempts),
        "submitted_time": submitted,
        "user": user,
    }


def write_philly_json(directory: Path, *jobs: dict[str, object], name: str = "log.json") -> Path:
    """A `cluster_job_log` list with one job per line: job k (0-based) is on line k + 2."""
    path = directory / name
    body = ",\n".join(json.dumps(job) for job in jobs)
    path.write_text(f"[\n{body}\n]\n", encoding="utf-8")
    return path
