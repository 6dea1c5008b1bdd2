"""Issue 25's contention sets under every registered policy: live beside replay.

    PYTHONPATH=. .venv/bin/python bench/contention.py [--sets elastic,gang]
        [--policies fifo,gandiva] [--timeout 240] [--start-s S] [--json]
    PYTHONPATH=. .venv/bin/python bench/contention.py --replay-from rows.jsonl

For each set (gpuflow/sandbox/example_jobs.py: `elastic`, one rigid and two elastic
2-GPU jobs of 600 steps on 1x4; `gang`, an 8-GPU gang of 400 steps created together
with two 1-GPU jobs of 1,500 steps on 2x4) and each policy (default: every one of
`policies.registry.policy_names()`, with its default options on both sides):

- live: `gpuflow sandbox run --json` with the example's real training processes,
  in a subprocess with `--timeout` (and a hard kill 60 s later). A run that fails,
  times out or leaves a job unfinished is reported as such, with its error.
- replay: the same jobs through `controller.sim.Simulator` with the same policy, the
  sandbox's placer (`consolidated`) and a round at every change as the live loop's
  rounds on events. The jobs are all submitted at 0, as the live operator, started
  once the jobs exist, sees them all in its first round; their ids are numbered in
  creation order (`default/00-rigid`) so that the simulator's tie-break (submit
  time, then id) orders them as the operator does. The example `mlp` has no profile
  in the model catalog, so the simulator's generic model would invent its speed;
  instead each job's work is given as `duration_s` = its steps over the steps/s the
  live run measured (its last `samplesPerSecond / batchSize`), so that both sides
  run the same work at the same speed and what differs is the decisions and their
  costs. A job whose live run measured nothing gets `FALLBACK_S_PER_STEP`. Each live
  attempt first starts a process (Python, torch, gpuflow.train: seconds, as long as
  the MLP's 600 steps on a loaded machine), so the replay adds `--start-s` (default:
  measured once before the runs, the median of three `python -m
  examples.train.train --help`) to each job's work and takes it as its (re)start
  and suspend-resume cost in place of the generic model's ~11 s checkpoint-restart
  (a 50 M-parameter model).

Per policy and job it prints restarts, batch-size changes and JCT, live beside
replay, and per set the makespan (the last JCT: the jobs are created together).
Live batch changes are the distinct batch sizes the job reported, less one (a lower
bound: a size left and returned to counts once); replay's are its REBATCH actions
(controller.tally). Recorded in docs/benchmarks.md ("The live loop under contention").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.model import Action, JobSpec
from controller.placement import make_placer
from controller.sim import SimConfig, Simulator
from controller.spec import named_cluster
from gpuflow.sandbox.example_jobs import CONTENTION_SETS, ContentionSet, example_job
from policies.registry import make_policy, policy_names

# The example manifest's own estimate: expectedDurationSeconds 60 for --steps=2000.
FALLBACK_S_PER_STEP = 60.0 / 2000
BATCH_SIZE = 64  # the example's spec.batchSize
KILL_AFTER_S = 60.0  # past --timeout, for a sandbox that does not stop by itself
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class JobFigures:
    restarts: int | None = None
    batch_changes: int | None = None
    jct_s: float | None = None
    status: str | None = None


@dataclass
class LiveRun:
    ok: bool
    error: str = ""
    wall_s: float | None = None
    jobs: dict[str, JobFigures] = field(default_factory=dict)
    s_per_step: dict[str, float] = field(default_factory=dict)


def live_run(set_name: str, policy: str, timeout_s: float) -> LiveRun:
    """The set in `gpuflow sandbox run --json` under `policy`; never raises for a
    failed run (the failure is the result)."""
    chosen = CONTENTION_SETS[set_name]
    with tempfile.TemporaryDirectory(prefix="contention-") as tmp:
        manifests = Path(tmp) / "jobs.yaml"
        manifests.write_text(yaml.safe_dump_all([example_job(s) for s in chosen.jobs]))
        argv = [sys.executable, "-m", "gpuflow.cli", "sandbox", "run", "--nodes", chosen.nodes]
        argv += ["--policy", policy, "--timeout", str(timeout_s), "--json", str(manifests)]
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout_s + KILL_AFTER_S,
                cwd=ROOT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return LiveRun(False, f"killed after {timeout_s + KILL_AFTER_S:.0f} s")
    return parse_live(proc.returncode, proc.stdout, proc.stderr)


def parse_live(returncode: int, stdout: str, stderr: str) -> LiveRun:
    """`sandbox run --json`'s output as figures; a non-zero exit or a job that did
    not succeed makes the run not ok, with the reason."""
    last_line = (stderr.strip().splitlines() or [""])[-1]
    try:
        out = json.loads(stdout)
    except json.JSONDecodeError:
        return LiveRun(False, f"exit {returncode}: {last_line or 'no JSON output'}")
    run = LiveRun(returncode == 0, "" if returncode == 0 else f"exit {returncode}: {last_line}")
    run.wall_s = out.get("wall_s")
    for j in out["jobs"]:
        sizes = j.get("batch_sizes") or []
        run.jobs[j["name"]] = JobFigures(
            j["restarts"], max(0, len(sizes) - 1), j.get("jct_s"), j.get("status")
        )
        rate = j.get("measured_rate_ips")
        if rate:
            run.s_per_step[j["name"]] = 1.0 / float(rate)
    unfinished = sorted(n for n, f in run.jobs.items() if f.status != "Succeeded")
    if unfinished and run.ok:
        run.ok, run.error = False, f"not Succeeded: {', '.join(unfinished)}"
    return run


def process_start_s(repeats: int = 3) -> float:
    """The median wall time of starting the example's process and exiting at once."""
    argv = [sys.executable, "-m", "examples.train.train", "--help"]
    times = []
    for _ in range(repeats):
        began = time.monotonic()
        subprocess.run(argv, capture_output=True, cwd=ROOT, check=True, timeout=120)
        times.append(time.monotonic() - began)
    return statistics.median(times)


def replay_run(
    chosen: ContentionSet, policy: str, s_per_step: Mapping[str, float], start_s: float
) -> dict[str, JobFigures]:
    """The set through the simulator under `policy`, each job's work its steps at
    `s_per_step[name]` (FALLBACK_S_PER_STEP when absent) plus `start_s`, which is also
    every (re)start's and suspend-resume's cost."""
    cluster = named_cluster(chosen.nodes)
    specs = [
        JobSpec(
            f"default/{k:02d}-{s.name}",
            0.0,
            s.gpus,
            model="mlp",
            duration_s=s.steps * s_per_step.get(s.name, FALLBACK_S_PER_STEP) + start_s,
            min_gpus=s.min_gpus,
            max_gpus=s.max_gpus,
            batch_size=BATCH_SIZE,
        )
        for k, s in enumerate(chosen.jobs)
    ]
    sim = Simulator(
        cluster,
        specs,
        make_policy(policy),
        make_placer("consolidated", cluster),
        SimConfig(round_interval_s=0.0, restart_s=start_s, suspend_resume_s=start_s),
    )
    result = sim.run()
    tally = sim.controller.tally
    out = {}
    for o in result.jobs:
        name = o.job_id.split("-", 1)[1]
        rebatches = tally.of(o.job_id).get(Action.REBATCH, 0)
        status = "Succeeded" if o.finish_s is not None else "unfinished"
        out[name] = JobFigures(o.restarts, rebatches, o.jct_s, status)
    return out


def makespan_s(jobs: Mapping[str, JobFigures]) -> float | None:
    """The last JCT (None unless every job finished)."""
    jcts = [f.jct_s for f in jobs.values()]
    return None if not jcts or any(j is None for j in jcts) else max(j for j in jcts if j)


def measure(set_name: str, policy: str, timeout_s: float, start_s: float) -> dict[str, Any]:
    """One row: the live run and the replay of the same set under `policy`."""
    chosen = CONTENTION_SETS[set_name]
    live = live_run(set_name, policy, timeout_s)
    replay = replay_run(chosen, policy, live.s_per_step, start_s)
    return {
        "set": set_name,
        "nodes": chosen.nodes,
        "policy": policy,
        "start_s": round(start_s, 3),
        "live_ok": live.ok,
        "live_error": live.error,
        "live_wall_s": live.wall_s,
        "s_per_step": {
            s.name: live.s_per_step.get(s.name, FALLBACK_S_PER_STEP) for s in chosen.jobs
        },
        "jobs": {
            s.name: {
                "live": asdict(live.jobs.get(s.name, JobFigures())),
                "replay": asdict(replay[s.name]),
            }
            for s in chosen.jobs
        },
        "makespan_s": {"live": makespan_s(live.jobs), "replay": makespan_s(replay)},
    }


def replayed(row: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded row (`--json`) with its replay side computed again from its live
    speeds and process start (`--replay-from`)."""
    chosen = CONTENTION_SETS[row["set"]]
    replay = replay_run(chosen, row["policy"], row["s_per_step"], row["start_s"])
    jobs = {name: {**sides, "replay": asdict(replay[name])} for name, sides in row["jobs"].items()}
    makespan = {**row["makespan_s"], "replay": makespan_s(replay)}
    return {**row, "jobs": jobs, "makespan_s": makespan}


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one line per policy and job, live / replay in each cell."""
    lines = [
        "| set | policy | job | restarts | batch changes | JCT s | makespan s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        span = row["makespan_s"]
        for k, (name, sides) in enumerate(row["jobs"].items()):
            live, replay = sides["live"], sides["replay"]
            cells = [
                f"{_num(live[key])} / {_num(replay[key])}"
                for key in ("restarts", "batch_changes", "jct_s")
            ]
            first = k == 0
            failed = "" if row["live_ok"] or not first else f" (live failed: {row['live_error']})"
            head = [row["set"], row["policy"] + failed] if first else ["", ""]
            tail = f"{_num(span['live'])} / {_num(span['replay'])}" if first else ""
            lines.append("| " + " | ".join([*head, name, *cells, tail]) + " |")
    return "\n".join(lines)


def _names(text: str, known: Sequence[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}"
        )
    return names


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--sets",
        type=lambda t: _names(t, list(CONTENTION_SETS), "set"),
        default=list(CONTENTION_SETS),
        help=f"comma-separated, of {', '.join(CONTENTION_SETS)} (default: all)",
    )
    parser.add_argument(
        "--policies",
        type=lambda t: _names(t, policy_names(), "policy"),
        default=policy_names(),
        help="comma-separated registered policies (default: all)",
    )
    parser.add_argument(
        "--timeout", type=float, default=240.0, help="seconds per live run (default 240)"
    )
    parser.add_argument(
        "--start-s",
        type=float,
        default=None,
        help="a process start in the replay (default: measured before the runs)",
    )
    parser.add_argument(
        "--replay-from",
        metavar="FILE",
        help="no live runs: the rows of an earlier --json run, their replay computed again",
    )
    parser.add_argument("--json", action="store_true", help="one JSON line per set and policy")
    args = parser.parse_args(argv)
    if not 0 < args.timeout <= 3600:
        parser.error(f"--timeout: must be in (0, 3600], not {args.timeout}")
    if args.start_s is not None and not 0 <= args.start_s <= 600:
        parser.error(f"--start-s: must be in [0, 600], not {args.start_s}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replay_from is not None:
        return _print(args, _recorded(args.replay_from))
    start_s = process_start_s() if args.start_s is None else args.start_s
    print(f"process start: {start_s:.2f} s", file=sys.stderr, flush=True)
    rows = []
    for set_name in args.sets:
        for policy in args.policies:
            row = measure(set_name, policy, args.timeout, start_s)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(
                    f"{set_name} {policy}: live {'ok' if row['live_ok'] else row['live_error']}",
                    file=sys.stderr,
                    flush=True,
                )
    return _print(args, rows, printed=args.json)


def _recorded(path: str) -> list[dict[str, Any]]:
    """The rows of `path` with their replay computed again; a file that cannot be
    read or is not this bench's --json output ends the bench with one line (exit 2)."""
    try:
        lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
        return [replayed(json.loads(line)) for line in lines]
    except OSError as exc:
        why = exc.strerror or str(exc)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"not this bench's --json rows ({type(exc).__name__}: {exc})"
    print(f"contention.py: error: --replay-from {path}: {why}", file=sys.stderr)
    raise SystemExit(2)


def _print(args: argparse.Namespace, rows: list[dict[str, Any]], printed: bool = False) -> int:
    if args.json and not printed:
        for row in rows:
            print(json.dumps(row))
    elif not args.json:
        print(table(rows))
    return 0 if all(r["live_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
