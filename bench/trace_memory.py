"""Peak memory and time of loading (validating) a large trace: `gpuflow trace validate`'s
work, and what the API does with an uploaded trace.

    .venv/bin/python bench/trace_memory.py [--rows 1000000]

Writes a canonical trace of `--rows` synthetic jobs to a temporary folder, then loads
it in a fresh process (so that the peak is the load's alone) and prints one JSON
object: rows, file size, peak RSS, seconds. The figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dataclasses import replace  # noqa: E402

from controller.traces import FORMATS, load_trace, write_canonical  # noqa: E402
from controller.traces.formats.synthetic import generate  # noqa: E402


def _peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: reset at exec, unlike getrusage's ru_maxrss,
    which a child inherits from the parent it was forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _copying_load(path: Path) -> int:
    """The load as it was before the in-place shift: every job held twice at the end."""
    parsed = FORMATS["gpuflow"](path)
    jobs = sorted(parsed.jobs, key=lambda job: (job.submit_s, job.job_id))
    start_s = jobs[0].submit_s
    shifted = tuple(replace(job, submit_s=job.submit_s - start_s) for job in jobs)
    return len(shifted)


def _load(path: Path, copying: bool) -> None:
    """Child process: load the trace, print the job count, time and peak RSS."""
    before_mib = _peak_rss_mib()
    t0 = time.perf_counter()
    jobs = _copying_load(path) if copying else len(load_trace(path, "gpuflow").jobs)
    seconds = time.perf_counter() - t0
    out = {
        "jobs": jobs,
        "load_s": round(seconds, 1),
        "peak_rss_mib": round(_peak_rss_mib()),
        "rss_before_load_mib": round(before_mib),
    }
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--load", help=argparse.SUPPRESS)  # the child's side
    p.add_argument("--copying", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.load:
        _load(Path(args.load), args.copying)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.csv"
        write_canonical(path, generate(args.rows, seed=1, cluster_gpus=4096, load=0.9))
        size_mib = path.stat().st_size / 2**20
        for variant in ("in_place", "copying"):
            extra = ["--copying"] if variant == "copying" else []
            child = subprocess.run(
                [sys.executable, __file__, "--load", str(path), *extra],
                capture_output=True,
                text=True,
                check=True,
            )
            result = {"rows": args.rows, "file_mib": round(size_mib, 1), "variant": variant}
            print(json.dumps({**result, **json.loads(child.stdout)}))


if __name__ == "__main__":
    main()
