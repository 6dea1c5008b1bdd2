"""The node agent's egress loop: the pods' allocated rates onto the NIC, and back.

`run_agent` (operators/agent/main.py) calls `EgressAgent.step` with the pods bound
to its node each time they change (a watch with field selector spec.nodeName) and
every `--interval`. The operator writes each running pod's rate in the annotation
`gpuflow.dev/egress-gbps` (operators/network/__init__.py); `step` gives the pods that carry
one and have an IP to the HTB enforcer (operators/agent/bandwidth.py), which
classifies a pod's packets by its source address, `status.podIP`, and drops the
class of a pod that is gone or finished. What the device holds afterwards is
reported on the Node as `gpuflow.dev/egress-applied` ({pod: Gbit/s}, JSON), with
tc's error in `gpuflow.dev/egress-error` while the last apply failed; the Node is
patched only when either changes. Under a phase network (cassini, crux) a pod also
carries `gpuflow.dev/egress-floor-gbps` and maybe `gpuflow.dev/net-priority`
(operators/network/phases.py): its class then borrows above the floor at the level's
HTB prio (bandwidth.py), and `gpuflow.dev/egress-classes` reports those pods'
floor and level ({pod: {"floor_gbps", "priority"}}, JSON). A failed apply is
retried at every step (the enforcer rebuilds its tree after a failure).

With enforcement off (`--no-enforce-bandwidth`) nothing runs tc, and the report
holds the rates the pods ask for. The tree is built only once a pod needs shaping,
so an agent on a node without such pods leaves the device's qdisc alone.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable

from operators import crd
from operators.agent.bandwidth import BandwidthEnforcer, PodRate
from operators.agent.htb import HTB_MAX_PRIO, BandwidthError, Runner, run_tc
from operators.kube import API_ERRORS, KubeApi, Obj
from operators.logs import emit, one_line

log = logging.getLogger(__name__)

FINISHED = ("Succeeded", "Failed")
# Pod key -> {"floor_gbps": Gbit/s or None, "priority": level or None}.
Classes = dict[str, dict[str, float | int | None]]


def default_route_interface(netns: str | None = None, runner: Runner = run_tc) -> str:
    """The device of the (IPv4) default route, from `ip -j route show default`."""
    prefix = ["ip"] if netns is None else ["ip", "-netns", netns]
    routes = json.loads(runner([*prefix, "-j", "route", "show", "default"]) or "[]")
    for route in routes:
        if route.get("dev"):
            return str(route["dev"])
    raise BandwidthError("no default route: pass --interface")


def wanted_rates(pods: Iterable[Obj]) -> list[PodRate]:
    """A PodRate for each pod that asks for an egress rate and can be shaped: it has
    an IP of its own (not hostNetwork: its address is the node's) and has not
    finished. Pods with a malformed rate are logged and left unshaped."""
    out = []
    for pod in sorted(pods, key=_key):
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        ann = meta.get("annotations") or {}
        text = ann.get(crd.ANN_EGRESS_GBPS)
        ip = status.get("podIP")
        if text is None or not ip or spec.get("hostNetwork") or status.get("phase") in FINISHED:
            continue
        floor, level = ann.get(crd.ANN_EGRESS_FLOOR_GBPS), ann.get(crd.ANN_NET_PRIORITY)
        try:
            out.append(
                PodRate(
                    _key(pod),
                    str(ip),
                    float(text),
                    floor_gbps=None if floor is None else float(floor),
                    priority=None if level is None else int(level),
                )
            )
        except ValueError as exc:
            emit(log, logging.WARNING, "egress rate ignored", pod=_key(pod), error=one_line(exc))
    return out


class EgressAgent:
    """Applies the pods' rates on one device and reports them on the node.

    `make_enforcer` is called once, when the first pod needs shaping (None: report
    only). State kept between steps: what was last applied and last reported, so
    that unchanged rates cost no tc call and no Node patch.
    """

    def __init__(
        self,
        api: KubeApi,
        node_name: str,
        make_enforcer: Callable[[], BandwidthEnforcer] | None,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.make_enforcer = make_enforcer
        self.enforcer: BandwidthEnforcer | None = None
        self._applied: dict[str, PodRate] | None = None  # None: unknown, apply again
        self._reported: tuple[dict[str, float], Classes, str | None] | None = None
        self.patches = 0

    def step(self, pods: Iterable[Obj]) -> None:
        rates = wanted_rates(pods)
        want = {r.pod_key: r for r in rates}
        error: str | None = None
        if self.make_enforcer is None or want == self._applied:
            applied, classes = _as_applied(rates)
        elif not want and self.enforcer is None:
            applied, classes = {}, {}  # nothing to shape yet: the device is left as it is
        else:
            applied, classes, error = self._apply(rates)
        self._report(applied, classes, error)

    def _apply(self, rates: list[PodRate]) -> tuple[dict[str, float], Classes, str | None]:
        try:
            if self.enforcer is None:
                assert self.make_enforcer is not None
                self.enforcer = self.make_enforcer()
            self.enforcer.apply(rates)
        except (BandwidthError, ValueError) as exc:  # ValueError: two pods on one IP
            self._applied = None
            return *self._read_back(), one_line(exc)
        self._applied = {r.pod_key: r for r in rates}
        fields = {"node": self.node_name, "dev": self.enforcer.dev, "pods": len(rates)}
        emit(log, logging.INFO, "egress applied", **fields)
        return *_as_applied(rates), None

    def _read_back(self) -> tuple[dict[str, float], Classes]:
        """What the kernel holds for the pods after a failure (empty if tc fails too)."""
        if self.enforcer is None:
            return {}, {}
        try:
            held = self.enforcer.current_classes()
        except BandwidthError:
            return {}, {}
        classes: Classes = {
            k: {"floor_gbps": c.rate_gbps, "priority": HTB_MAX_PRIO - c.prio if c.prio else None}
            for k, c in held.items()
            if c.rate_gbps < c.ceil_gbps
        }
        return {k: c.ceil_gbps for k, c in held.items()}, classes

    def _report(self, applied: dict[str, float], classes: Classes, error: str | None) -> None:
        if self._reported == (applied, classes, error):
            return
        doc = {k: v for k, v in sorted(applied.items()) if math.isfinite(v)}
        ann = {
            crd.ANN_NODE_EGRESS_APPLIED: json.dumps(doc, separators=(",", ":")),
            # None deletes them (merge patch)
            crd.ANN_NODE_EGRESS_CLASSES: json.dumps(dict(sorted(classes.items())))
            if classes
            else None,
            crd.ANN_NODE_EGRESS_ERROR: error,
        }
        if error is not None:
            emit(log, logging.WARNING, "egress not applied", node=self.node_name, error=error)
        try:
            self.api.patch_node(self.node_name, {"metadata": {"annotations": ann}})
        except API_ERRORS:
            return  # KubeApi logged it; the next step reports again
        self.patches += 1
        self._reported = (applied, classes, error)


def _as_applied(rates: list[PodRate]) -> tuple[dict[str, float], Classes]:
    """The report of `rates`: each pod's rate, and the floor and level of those that
    borrow."""
    classes: Classes = {
        r.pod_key: {"floor_gbps": r.floor_gbps, "priority": r.priority}
        for r in rates
        if r.floor_gbps is not None or r.priority is not None
    }
    return {r.pod_key: r.rate_gbps for r in rates}, classes


def _key(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace') or ''}/{meta['name']}"
