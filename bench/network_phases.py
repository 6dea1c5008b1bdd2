"""Two synthetic jobs on one shaped link: measured iteration times against the model.

    sudo .venv/bin/python bench/network_phases.py [--capacity-gbps 0.04] [--compute-s 0.3]
        [--comm-mb 1.0] [--measure-s 10] [--repeats 3] [--sharing fair|priority]

Runs gpuflow.netexp's experiment (root: network namespaces and tc) and prints, per
repeat: one job alone (the calibration the model is fed: effective compute phase
and link capacity), then the pair in phase (held in lockstep), in phase run free,
shifted by half a period, and held to comm slots half a period apart
(gpuflow.train.commslot); for each job its mean iteration time, the spread of its
iterations, the share of its transfers overlapped by the other's, and the phase
model's prediction (controller.network.phases.shared_link_iteration_s).
With `--sharing priority` job 0 has the higher HTB priority (gpuflow.netexp.link)
and the pair runs free from in phase and from half a period apart, against the
model's `priority` rule.
"""

from __future__ import annotations

import argparse
import statistics

from controller.network.phases import shared_link_iteration_s
from gpuflow.netexp.experiment import (
    Calibration,
    JobRun,
    SyntheticJob,
    calibrate,
    overlap_fraction,
    run_jobs,
)
from gpuflow.netexp.link import SharedLink
from gpuflow.train.commslot import CommSlot


def _row(name: str, runs: list[JobRun], model: tuple[float, ...] | None) -> None:
    for i, run in enumerate(runs):
        others = [r for j, r in enumerate(runs) if j != i]
        its = run.iteration_s
        cells = [
            f"{name:<22}", f"job {i}", f"{run.mean_iteration_s:.4f}",
            f"[{min(its):.3f}, {max(its):.3f}] sd {statistics.pstdev(its):.4f} n={len(its)}",
            f"overlap {overlap_fraction(run, others):.2f}",
        ]  # fmt: skip
        if model is not None:
            error = (run.mean_iteration_s - model[i]) / model[i]
            cells += [f"model {model[i]:.4f}", f"error {error:+.1%}"]
        print("  ".join(cells))


def _once(link: SharedLink, args: argparse.Namespace) -> None:
    solo: Calibration = calibrate(link, args.compute_s, args.comm_mb)
    print(
        f"alone: iteration {solo.iteration_s:.4f} s = compute {solo.compute_s:.4f} s + transfer "
        f"{solo.transfer_s:.4f} s; effective capacity {solo.capacity_gbps * 1000:.2f} Mbit/s "
        f"(shaped to {args.capacity_gbps * 1000:.0f})"
    )

    def model(offsets: list[float]) -> tuple[float, ...]:
        return shared_link_iteration_s([solo.compute_s] * 2, [args.comm_mb] * 2, offsets,
                                       solo.capacity_gbps)  # fmt: skip

    job = SyntheticJob(args.compute_s, args.comm_mb)
    half = solo.iteration_s / 2
    m = args.measure_s
    _row("in phase (lockstep)", run_jobs(link, [job, job], measure_s=m, lockstep=True),
         model([0.0, 0.0]))  # fmt: skip
    _row("in phase (run free)", run_jobs(link, [job, job], measure_s=m), None)
    shifted = SyntheticJob(args.compute_s, args.comm_mb, offset_s=half)
    _row("shifted by half", run_jobs(link, [job, shifted], measure_s=m), model([0.0, half]))
    period = solo.iteration_s * 1.05
    slotted = [SyntheticJob(args.compute_s, args.comm_mb, slot=CommSlot(period, o))
               for o in (0.0, period / 2)]  # fmt: skip
    _row(f"slots of {period:.3f} s", run_jobs(link, slotted, measure_s=m), (period, period))


def _priority_once(link: SharedLink, args: argparse.Namespace) -> None:
    solo = calibrate(link, args.compute_s, args.comm_mb)
    print(f"alone (job 0's class): iteration {solo.iteration_s:.4f} s, transfer "
          f"{solo.transfer_s:.4f} s, {solo.capacity_gbps * 1000:.2f} Mbit/s")  # fmt: skip
    for offset in (0.0, solo.iteration_s / 2):
        jobs = [SyntheticJob(args.compute_s, args.comm_mb),
                SyntheticJob(args.compute_s, args.comm_mb, offset_s=offset)]  # fmt: skip
        model = shared_link_iteration_s(
            [solo.compute_s] * 2, [args.comm_mb] * 2, [0.0, offset], solo.capacity_gbps,
            sharing="priority", priority=[1, 0],
        )  # fmt: skip
        _row(
            f"priority, offset {offset:.3f}", run_jobs(link, jobs, measure_s=args.measure_s), model
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity-gbps", type=float, default=0.04)
    parser.add_argument("--compute-s", type=float, default=0.3)
    parser.add_argument("--comm-mb", type=float, default=1.0)
    parser.add_argument("--measure-s", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sharing", choices=["fair", "priority"], default="fair")
    args = parser.parse_args()
    priorities = (1, 0) if args.sharing == "priority" else None
    with SharedLink.create(args.capacity_gbps, jobs=2, priorities=priorities) as link:
        for r in range(args.repeats):
            print(f"--- repeat {r + 1} of {args.repeats}")
            (_priority_once if priorities else _once)(link, args)


if __name__ == "__main__":
    main()
