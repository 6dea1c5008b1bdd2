"""One shaped link between two network namespaces, shared fairly by the jobs on it.

    with SharedLink.create(capacity_gbps=0.04, jobs=2) as link:
        link.exec_prefix(link.sender_ns)   # ["ip", "netns", "exec", "gfx-s-123"]
        link.job_ip(0), link.receiver_ip

The senders' namespace holds one address per job on its end of a veth pair; the
receivers' namespace holds one address on the other end. The senders' end is
shaped with HTB (built with operators/agent/htb.py's command builders, as
the node agent shapes a NIC):

    1:      htb root qdisc, unclassified traffic to 1:ffff
    1:1     the link: rate = ceil = capacity
    1:2..   one class per job, matched by its source address:
            fair: rate = capacity / jobs, ceil = capacity
            priorities: rate = 1 % of the capacity, ceil = capacity, HTB prio
    1:ffff  everything else: rate = 1 % of the capacity, ceil = capacity

Fair: each job is guaranteed its equal share and may borrow what the others leave,
so a job alone gets the whole link and n busy jobs get capacity / n each: per-job
fair sharing, the phase model's `fair` rule, enforced per packet by HTB rather than
left to the TCP flows' own convergence (this kernel lacks fq_codel and sfq, and a
plain FIFO leaves two flows' shares to chance for the first round trips of every
burst). Priorities: every job is guaranteed only the floor and borrows the rest,
and HTB lends to the class of lowest `prio` first, so a busy job of a higher
priority takes all but the others' floors: the model's `priority` rule (strict, as
Crux's hardware queues, §4.3) up to the 1 % floor. Higher numbers are higher
priorities, as in controller.network.phases; HTB's prio counts the other way.
Called by gpuflow.netexp.experiment.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from operators.agent.htb import (
    DEFAULT_FLOOR_FRACTION,
    DEFAULT_MINOR,
    FIRST_POD_MINOR,
    LINK_MINOR,
    ROOT_HANDLE,
    class_id,
    filter_add_args,
    htb_class_args,
)

SUBNET_PREFIX = "10.204.0."  # private, unused elsewhere in the project's tests
RECEIVER_HOST = 1
FIRST_JOB_HOST = 11
COMMAND_TIMEOUT_S = 10
HTB_MAX_PRIO = 7  # HTB's prio runs from 0 (served first) to 7


class LinkError(RuntimeError):
    """An ip or tc command failed; the message carries its stderr on one line."""


def _run(*argv: str) -> str:
    try:
        proc = subprocess.run(argv, check=True, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise LinkError(f"{' '.join(argv)}: {' '.join(str(exc.stderr).split())}") from exc
    return proc.stdout


@dataclass
class SharedLink:
    """Two namespaces joined by a veth pair whose senders' end is shaped (module doc)."""

    sender_ns: str
    receiver_ns: str
    sender_dev: str
    capacity_gbps: float
    jobs: int
    priorities: tuple[int, ...] | None = None

    @classmethod
    def create(
        cls,
        capacity_gbps: float,
        jobs: int,
        tag: str | None = None,
        priorities: Sequence[int] | None = None,
    ) -> SharedLink:
        if not capacity_gbps > 0:
            raise ValueError(f"capacity_gbps must be positive, got {capacity_gbps}")
        if not 1 <= jobs <= 200:
            raise ValueError(f"jobs must be between 1 and 200, got {jobs}")
        levels = None if priorities is None else tuple(priorities)
        if levels is not None and (len(levels) != jobs or max(levels) - min(levels) > HTB_MAX_PRIO):
            raise ValueError(f"priorities: one per job, at most {HTB_MAX_PRIO + 1} levels apart")
        tag = tag or str(os.getpid())
        link = cls(f"gfx-s-{tag}", f"gfx-r-{tag}", f"gfxs{tag}"[:15], capacity_gbps, jobs, levels)
        try:
            link._build(f"gfxr{tag}"[:15])
        except BaseException:
            link.teardown()
            raise
        return link

    @property
    def receiver_ip(self) -> str:
        return f"{SUBNET_PREFIX}{RECEIVER_HOST}"

    def job_ip(self, job: int) -> str:
        return f"{SUBNET_PREFIX}{FIRST_JOB_HOST + job}"

    def exec_prefix(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def _build(self, receiver_dev: str) -> None:
        s, r, dev = self.sender_ns, self.receiver_ns, self.sender_dev
        _run("ip", "netns", "add", s)
        _run("ip", "netns", "add", r)
        _run(
            "ip",
            "link",
            "add",
            dev,
            "netns",
            s,
            "type",
            "veth",
            "peer",
            "name",
            receiver_dev,
            "netns",
            r,
        )
        for ns in (s, r):
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", r, "addr", "add", f"{self.receiver_ip}/24", "dev", receiver_dev)
        for job in range(self.jobs):
            _run("ip", "-n", s, "addr", "add", f"{self.job_ip(job)}/24", "dev", dev)
        _run("ip", "-n", s, "link", "set", dev, "up")
        _run("ip", "-n", r, "link", "set", receiver_dev, "up")
        self._shape()

    def _shape(self) -> None:
        cap = self.capacity_gbps
        tc = ["tc", "-netns", self.sender_ns]
        dev = self.sender_dev
        _run(*tc, "qdisc", "replace", "dev", dev, "root", "handle", ROOT_HANDLE,
             "htb", "default", f"{DEFAULT_MINOR:x}")  # fmt: skip
        _run(*tc, *htb_class_args("add", dev, LINK_MINOR, ROOT_HANDLE, cap, cap))
        link = class_id(LINK_MINOR)
        _run(
            *tc, *htb_class_args("add", dev, DEFAULT_MINOR, link, cap * DEFAULT_FLOOR_FRACTION, cap)
        )
        for job in range(self.jobs):
            minor = FIRST_POD_MINOR + job
            if self.priorities is None:
                _run(*tc, *htb_class_args("add", dev, minor, link, cap / self.jobs, cap))
            else:
                floor = cap * DEFAULT_FLOOR_FRACTION
                prio = max(self.priorities) - self.priorities[job]
                _run(*tc, *htb_class_args("add", dev, minor, link, floor, cap), "prio", str(prio))
            _run(*tc, *filter_add_args(dev, minor, self.job_ip(job)))

    def teardown(self) -> None:
        # Deleting a namespace deletes the veth end in it, and with it its peer.
        for ns in (self.sender_ns, self.receiver_ns):
            subprocess.run(
                ["ip", "netns", "del", ns], capture_output=True, timeout=COMMAND_TIMEOUT_S
            )

    def __enter__(self) -> SharedLink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.teardown()
