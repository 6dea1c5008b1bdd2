"""Per-pod egress rates with Linux traffic control: the node agent's bandwidth enforcer.

The network allocator (controller/) decides a rate for every flow a job sends; the
operator publishes each pod's rate (operators/network/__init__.py) and the node agent's
egress step (operators/agent/egress.py) calls `BandwidthEnforcer.apply` with one
`PodRate` per pod on its node, each time those rates change. The enforcer keeps an
HTB tree on the node's egress device in step with those rates:

    1:      htb root qdisc, unclassified traffic to 1:ffff
    1:1     the link: rate = ceil = link rate
    1:ffff  default class: a small guaranteed floor, may borrow up to the link rate
    1:N     one class per pod: rate = ceil = the pod's rate, a leaf qdisc,
            and a u32 filter (preference N) matching the pod's source IP

Under a phase network (cassini, crux: operators/network/phases.py) a pod also has a
floor and maybe a priority level: its class is guaranteed rate = the floor and
borrows up to ceil = the pod's rate, at HTB prio HTB_MAX_PRIO - level. HTB lends
spare link capacity to the classes of lowest prio first and shares it within a prio
in proportion to their quanta (which follow the floors), so jobs that take turns each
get the whole link in their turn, and under crux a busy higher level takes all but
the lower levels' floors (Crux's strict priority, up to the floor; measured by
gpuflow.netexp: docs/network.md).

Rates are Gbit/s, as everywhere in gpuflow. The tc commands, the sizing of burst and
quantum and the parsing of tc's output are operators/agent/htb.py's; every tc call
goes through its `run_tc` (or a runner given instead, in tests). docs/bandwidth.md
explains the choices and the measured accuracy.
"""

from __future__ import annotations

import heapq
import ipaddress
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from operators.agent.htb import (
    DEFAULT_FLOOR_FRACTION,
    DEFAULT_MINOR,
    FIRST_POD_MINOR,
    HTB_MAX_PRIO,
    LAST_POD_MINOR,
    LINK_MINOR,
    ROOT_HANDLE,
    BandwidthError,
    HtbClass,
    Runner,
    class_id,
    filter_add_args,
    filter_del_args,
    htb_class_args,
    leaf_args,
    parse_classes,
    rate_bits,
    run_tc,
)

# veth and loopback have no link speed, so HTB needs one: 100 Gbit/s is more than a
# veth carries (about 20 Gbit/s on our CI VM), so the link class never binds there.
# On a real node pass the NIC's speed, or unclassified traffic may crowd the NIC.
DEFAULT_LINK_RATE_GBPS = 100.0

DEFAULT_LEAF_QDISC = "fq_codel"


@dataclass(frozen=True)
class PodRate:
    """The egress rate the allocator gives one pod, identified by its source IP."""

    pod_key: str
    ip: str
    rate_gbps: float
    # A class that borrows: guaranteed floor_gbps (<= rate_gbps, the ceiling), lent
    # spare capacity at `priority` (a level, 0..HTB_MAX_PRIO, higher first). None:
    # rate = ceil, and the default prio.
    floor_gbps: float | None = None
    priority: int | None = None

    def __post_init__(self) -> None:
        ipaddress.ip_address(self.ip)  # raises ValueError on a malformed address
        if not (math.isfinite(self.rate_gbps) and self.rate_gbps > 0):
            raise ValueError(f"{self.pod_key}: rate must be positive, got {self.rate_gbps}")
        if rate_bits(self.rate_gbps) < 1:
            raise ValueError(f"{self.pod_key}: rate {self.rate_gbps} Gbit/s rounds to 0 bit/s")
        floor = self.floor_gbps
        if floor is not None and not (math.isfinite(floor) and 0 < floor <= self.rate_gbps):
            raise ValueError(f"{self.pod_key}: floor must be in (0, rate], got {floor}")
        if floor is not None and rate_bits(floor) < 1:
            raise ValueError(f"{self.pod_key}: floor {floor} Gbit/s rounds to 0 bit/s")
        if self.priority is not None and not 0 <= self.priority <= HTB_MAX_PRIO:
            raise ValueError(
                f"{self.pod_key}: priority must be 0..{HTB_MAX_PRIO}, got {self.priority}"
            )

    @property
    def guaranteed_gbps(self) -> float:
        """The class's HTB rate: the floor if it borrows, else the whole rate."""
        return self.rate_gbps if self.floor_gbps is None else self.floor_gbps

    @property
    def htb_prio(self) -> int | None:
        return None if self.priority is None else HTB_MAX_PRIO - self.priority


@dataclass(frozen=True)
class _Installed:
    minor: int
    ip: str
    rate_bits: int
    floor_bits: int | None = None
    priority: int | None = None

    @staticmethod
    def of(minor: int, pod: PodRate) -> _Installed:
        floor = None if pod.floor_gbps is None else rate_bits(pod.floor_gbps)
        return _Installed(minor, pod.ip, rate_bits(pod.rate_gbps), floor, pod.priority)

    def same_class(self, other: _Installed) -> bool:
        return (self.rate_bits, self.floor_bits, self.priority) == (
            other.rate_bits,
            other.floor_bits,
            other.priority,
        )


class BandwidthEnforcer:
    """Keeps the HTB tree on one device in step with the allocator's pod rates.

    The pod -> class minor mapping lives here: new pods take the lowest free minor,
    so the same sequence of `apply` calls always yields the same class ids. A fresh
    enforcer (an agent restart) rebuilds the tree on its first `apply`, and so does
    the next `apply` after a failed one, since the device's state is then unknown.
    """

    def __init__(
        self,
        dev: str,
        *,
        netns: str | None = None,
        link_rate_gbps: float = DEFAULT_LINK_RATE_GBPS,
        leaf_qdisc: str | None = DEFAULT_LEAF_QDISC,
        runner: Runner = run_tc,
    ) -> None:
        if not (math.isfinite(link_rate_gbps) and link_rate_gbps > 0):
            raise ValueError(f"link rate must be positive, got {link_rate_gbps}")
        self.dev = dev
        self.netns = netns
        self.link_rate_gbps = link_rate_gbps
        self.leaf_qdisc = leaf_qdisc
        self._runner = runner
        self._pods: dict[str, _Installed] = {}
        self._free: list[int] = []  # a heap of released minors
        self._next_minor = FIRST_POD_MINOR
        self._ready = False

    def apply(self, rates: Sequence[PodRate]) -> None:
        """Makes the device enforce exactly `rates`; pods not listed fall to the default."""
        desired = _index(rates)
        try:
            if not self._ready:
                self._rebuild()
            for key in sorted(self._pods.keys() - desired.keys()):
                self._remove(key)
            for key in sorted(desired):
                pod = desired[key]
                have = self._pods.get(key)
                if have is None:
                    self._add(pod)
                    continue
                want = _Installed.of(have.minor, pod)
                if not want.same_class(have):
                    # change, not delete + add: the class keeps its queue and its
                    # filter, so packets in flight are not dropped nor misrouted.
                    self._tc(self._class_args("change", have.minor, pod))
                if pod.ip != have.ip:
                    self._tc(filter_del_args(self.dev, have.minor))
                    self._tc(filter_add_args(self.dev, have.minor, pod.ip))
                self._pods[key] = want
        except BandwidthError:
            self._ready = False
            raise

    def current(self) -> dict[str, float]:
        """Pod key -> its rate (the class's ceil) in Gbit/s, as the kernel reports the
        pods' classes now."""
        return {key: c.ceil_gbps for key, c in self.current_classes().items()}

    def current_classes(self) -> dict[str, HtbClass]:
        """Pod key -> its class as the kernel reports it now."""
        out = self._tc(["-j", "class", "show", "dev", self.dev])
        by_class = parse_classes(out)
        return {
            key: by_class[class_id(pod.minor)]
            for key, pod in sorted(self._pods.items())
            if class_id(pod.minor) in by_class
        }

    def class_of(self, pod_key: str) -> str | None:
        """The HTB class id that carries `pod_key`'s traffic, if it has one."""
        pod = self._pods.get(pod_key)
        return None if pod is None else class_id(pod.minor)

    def clear(self) -> None:
        """Removes the root qdisc (and with it every class and filter) if it is ours."""
        if self._has_root():
            self._tc(["qdisc", "del", "dev", self.dev, "root"])
        self._forget()

    def _rebuild(self) -> None:
        self.clear()
        link = self.link_rate_gbps
        # replace, not add: a foreign root qdisc (mq, fq_codel on a NIC) gives way.
        self._tc(["qdisc", "replace", "dev", self.dev, "root", "handle", ROOT_HANDLE,
                  "htb", "default", f"{DEFAULT_MINOR:x}"])  # fmt: skip
        self._tc(htb_class_args("add", self.dev, LINK_MINOR, ROOT_HANDLE, link, link))
        floor = link * DEFAULT_FLOOR_FRACTION
        self._tc(htb_class_args("add", self.dev, DEFAULT_MINOR, class_id(LINK_MINOR), floor, link))
        if self.leaf_qdisc is not None:
            self._tc(leaf_args(self.dev, DEFAULT_MINOR, self.leaf_qdisc))
        self._ready = True

    def _add(self, pod: PodRate) -> None:
        minor = self._take_minor()
        # Record the pod before its first command: if one fails, the next apply
        # rebuilds anyway, and the minor must not be handed out twice meanwhile.
        self._pods[pod.pod_key] = _Installed.of(minor, pod)
        self._tc(self._class_args("add", minor, pod))
        if self.leaf_qdisc is not None:
            self._tc(leaf_args(self.dev, minor, self.leaf_qdisc))
        self._tc(filter_add_args(self.dev, minor, pod.ip))

    def _remove(self, key: str) -> None:
        pod = self._pods[key]
        # Filter first, so no packet is classified into a class about to vanish.
        self._tc(filter_del_args(self.dev, pod.minor))
        self._tc(["class", "del", "dev", self.dev, "classid", class_id(pod.minor)])
        del self._pods[key]
        heapq.heappush(self._free, pod.minor)

    def _class_args(self, verb: str, minor: int, pod: PodRate) -> list[str]:
        link = class_id(LINK_MINOR)
        return htb_class_args(
            verb, self.dev, minor, link, pod.guaranteed_gbps, pod.rate_gbps, pod.htb_prio
        )

    def _take_minor(self) -> int:
        if self._free:
            return heapq.heappop(self._free)
        if self._next_minor > LAST_POD_MINOR:
            raise BandwidthError(f"{self.dev}: no free HTB class id for another pod")
        minor = self._next_minor
        self._next_minor += 1
        return minor

    def _has_root(self) -> bool:
        out = self._tc(["-j", "qdisc", "show", "dev", self.dev, "root"])
        entries = json.loads(out) if out.strip() else []
        return any(e.get("kind") == "htb" and e.get("handle") == ROOT_HANDLE for e in entries)

    def _forget(self) -> None:
        self._pods.clear()
        self._free.clear()
        self._next_minor = FIRST_POD_MINOR
        self._ready = False

    def _tc(self, args: list[str]) -> str:
        prefix = ["tc"] if self.netns is None else ["tc", "-netns", self.netns]
        return self._runner([*prefix, *args])


def _index(rates: Sequence[PodRate]) -> dict[str, PodRate]:
    by_key: dict[str, PodRate] = {}
    owner_of_ip: dict[str, str] = {}
    for pod in rates:
        if pod.pod_key in by_key:
            raise ValueError(f"pod {pod.pod_key} listed twice")
        ip = str(ipaddress.ip_address(pod.ip))
        if ip in owner_of_ip:
            raise ValueError(f"pods {owner_of_ip[ip]} and {pod.pod_key} share the IP {ip}")
        by_key[pod.pod_key] = pod
        owner_of_ip[ip] = pod.pod_key
    return by_key
