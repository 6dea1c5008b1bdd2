"""Quota resources to the quota tree, and the tree's state back into their status.

The operator (operators/operator.py) lists the cluster-scoped `Quota` resources each
round (`QuotaReader`; the deprecated `Queue` ones too, for one release: a Quota wins
over a Queue of the same name, and a log line says to migrate), turns them into the
controller's `QuotaTree` with the same loader replays use (controller.quotas.spec, in
its flat `parent` form), hands the tree to the controller as its `Quotas`
(controller.quotas.admission: the admission and reclaim step replays run, so a live
quota gets its guarantee and borrowed GPUs are reclaimed by the backend's graceful
preemption), and after the round writes each object's status (`quota_statuses`),
to the kind it was read from. The API in cluster mode (api/quotas/store.py) converts
with `quota_data`/`quota_object` as well, so that REST and kubectl meet in the same
resources.

A tree with a broken rule is not applied: the operator keeps the last tree that was
valid (none at first: no quotas) and marks the quota at fault Invalid, naming the
field, as a DLJob that cannot run is marked Invalid.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.model import JobView, Plan, Snapshot
from controller.model.quotas import QuotaSpecError, QuotaTree
from controller.quotas.admission import Quotas
from controller.quotas.spec import quotas_from_data
from operators import crd
from operators.dljobs.resources import DEFAULT_GRACE_S
from operators.kube import API_ERRORS, KubeApi
from operators.logs import emit
from operators.quotas.resources import QuotaApi, is_legacy, legacy, list_quotas

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# How often the Quotas are listed: an admin's change is applied within this (plus
# the wait for the next round) at the cost of two LISTs (the deprecated Queues too);
# reads are cheap, and rounds can come every 50 ms under load.
QUOTA_READ_S = 1.0
ACTIVE = "Active"
INVALID = "Invalid"
_INDEX = re.compile(r"^queues\[(\d+)\]\.?")


def quota_data(obj: Obj) -> dict[str, Any]:
    """A Quota (or Queue) resource as one item of the loader's flat list (`parent` form)."""
    spec = obj.get("spec") or {}
    item: dict[str, Any] = {"name": obj["metadata"]["name"]}
    for key, by_model in (("guarantee", "guaranteeByModel"), ("limit", "limitByModel")):
        value = spec.get(by_model) if spec.get(by_model) else spec.get(key)
        if value is not None:
            item[key] = value
    for key in ("parent", "weight", "tenants"):
        if spec.get(key) is not None:
            item[key] = spec[key]
    return item


def quota_object(item: Mapping[str, Any]) -> Obj:
    """The Quota resource for one loader item (the API's create and replace)."""
    spec: dict[str, Any] = {}
    for key, by_model in (("guarantee", "guaranteeByModel"), ("limit", "limitByModel")):
        value = item.get(key)
        if isinstance(value, Mapping):
            spec[by_model] = dict(value)
        elif value is not None:
            spec[key] = value
    for key in ("parent", "weight", "tenants"):
        if item.get(key) is not None:
            spec[key] = item[key]
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.QUOTA_KIND,
        "metadata": {"name": item["name"]},
        "spec": spec,
    }


@dataclass(frozen=True)
class TreeRead:
    """One reading of the Quotas: the tree (None when there are none or the first
    ones are broken) and, when broken, the quota at fault and why."""

    tree: QuotaTree | None
    invalid: dict[str, str]


def read_tree(objs: list[Obj]) -> TreeRead:
    """The tree the Quota resources define, in name order (deterministic)."""
    if not objs:
        return TreeRead(None, {})
    ordered = sorted(objs, key=lambda o: str(o["metadata"]["name"]))
    items = [quota_data(o) for o in ordered]
    try:
        return TreeRead(quotas_from_data(items), {})
    except QuotaSpecError as exc:
        return TreeRead(None, {_culprit(exc.field, items): _spec_message(exc)})


def _culprit(field: str, items: list[dict[str, Any]]) -> str:
    m = _INDEX.match(field)
    if m is None or int(m.group(1)) >= len(items):
        return str(items[0]["name"])
    return str(items[int(m.group(1))]["name"])


def _spec_message(exc: QuotaSpecError) -> str:
    """The error with the loader's `queues[i].` prefix as the resource's `spec.`."""
    rest = _INDEX.sub("", exc.field)
    field = f"spec.{rest}" if rest and not rest.startswith("children") else "spec"
    return f"{field}: {exc.message}"


class QuotaReader:
    """Lists the Quota resources (and the deprecated Queues) at most every `every_s`;
    keeps the last valid tree."""

    def __init__(self, api: KubeApi, every_s: float = QUOTA_READ_S) -> None:
        self.api = api
        self.every_s = every_s
        self.objects: list[Obj] = []
        self.tree: QuotaTree | None = None
        # The controller's admission and reclaim step for `tree` (None: no quotas),
        # made again only when the tree changes. Its grace period is the pods' default
        # terminationGracePeriodSeconds: the round after a reclaim's deadline decides
        # again even if no pod event wakes the loop.
        self.quotas: Quotas | None = None
        self.invalid: dict[str, str] = {}
        self._read_at = -float("inf")
        self._missing_logged = False
        self._legacy_logged: list[str] = []

    def read(self, now: float | None = None) -> QuotaTree | None:
        """The tree to apply this round (the previous one between reads)."""
        now = time.monotonic() if now is None else now
        if now - self._read_at < self.every_s:
            return self.tree
        self._read_at = now
        try:
            self.objects = self.list_quotas()
        except API_ERRORS:
            return self.tree  # KubeApi logged it; the last tree stays in force
        got = read_tree(self.objects)
        self.invalid = got.invalid
        if got.invalid:
            for name, message in got.invalid.items():
                emit(log, logging.WARNING, "quota invalid", quota=name, error=message)
        elif got.tree != self.tree:
            self.tree = got.tree
            self.quotas = None if got.tree is None else Quotas(got.tree, grace_s=DEFAULT_GRACE_S)
        return self.tree

    def list_quotas(self) -> list[Obj]:
        """Every Quota, and each deprecated Queue no Quota replaces; none when neither
        CRD is installed (a missing Quota CRD logged once). The Queues still read are
        logged when they change, with the command that migrates them."""
        got = list_quotas(self.api)
        if crd.QUOTA_PLURAL in got.missing and not self._missing_logged:
            queues = crd.LEGACY_QUEUE_PLURAL not in got.missing
            what = "quotas from deprecated Queues only" if queues else "no quotas"
            emit(log, logging.INFO, f"no Quota CRD: {what}", crd=crd.QUOTA_CRD_PATH.name)
            self._missing_logged = True
        if got.legacy and got.legacy != self._legacy_logged:
            emit(
                log,
                logging.WARNING,
                "deprecated Queues read as Quotas",
                queues=",".join(got.legacy),
                migrate_with="gpuflow quotas migrate",
            )
        self._legacy_logged = got.legacy
        return got.objects


def quota_statuses(
    tree: QuotaTree | None,
    invalid: Mapping[str, str],
    snapshot: Snapshot,
    plan: Plan,
    reclaims: Mapping[str, int],
) -> dict[str, Obj]:
    """Each quota's status after a round: GPUs its running jobs hold (an inner
    quota's subtree's), how many over its guarantee, its waiting jobs by the round's
    reason, its reclaims so far; a quota at fault is Invalid with the reason."""
    out: dict[str, Obj] = {}
    if tree is not None:
        held = dict.fromkeys(tree.names(), 0)
        pending: dict[str, dict[str, int]] = {n: {} for n in tree.names()}
        for view in snapshot.jobs:
            leaf = tree.leaf_of(view.spec)
            if leaf is None:
                continue
            reason = plan.reason_for(view.job_id)
            for name in tree.chain(leaf):
                if view.running:
                    held[name] += view.num_gpus
                elif view.job_id not in plan.run:
                    code = reason.code if reason is not None else view.status.value
                    pending[name][code] = pending[name].get(code, 0) + 1
        for name in tree.names():
            node = tree.node(name)
            assert node is not None
            guarantee = node.guarantee.total
            out[name] = {
                "phase": ACTIVE,
                "guaranteeGpus": guarantee,
                "allocatedGpus": held[name],
                "borrowedGpus": max(0, held[name] - guarantee),
                "pendingJobs": sum(pending[name].values()),
                "pendingByReason": dict(sorted(pending[name].items())),
                "reclaims": reclaims.get(name, 0),
            }
    for name, message in invalid.items():
        out[name] = {**out.get(name, {}), "phase": INVALID, "message": message}
    return out


class QuotaStatusWriter:
    """Writes each object's status when it changed (one replace per changed quota), to
    the kind it was read from: a Queue not yet migrated keeps its status current."""

    def __init__(self, api: KubeApi) -> None:
        self.quotas = QuotaApi(api)
        self.legacy = legacy(api)
        # The last status written, by (kind, name): a Queue migrated to a Quota of its
        # name is a new object whose status is still to write.
        self._written: dict[tuple[str, str], Obj] = {}

    def write(self, objects: list[Obj], statuses: Mapping[str, Obj], now_iso: str) -> None:
        """Write the statuses that changed; `objects` (the reader's) take the written
        objects' resourceVersions, so the next write does not conflict."""
        for i, obj in enumerate(objects):
            name = obj["metadata"]["name"]
            key = (str(obj.get("kind")), name)
            status = statuses.get(name)
            if status is None or self._written.get(key) == status:
                continue
            body = {**obj, "status": {**status, "updateTime": now_iso}}
            calls = self.legacy if is_legacy(obj) else self.quotas
            try:
                objects[i] = calls.replace_status(body)
            except API_ERRORS:
                continue  # KubeApi logged it (a conflict: the next read brings it)
            self._written[key] = status


def reclaimed(snapshot: Snapshot, plan: Plan) -> list[JobView]:
    """Running jobs the round stops for a reclaim (their reason's code says so)."""
    out = []
    for view in snapshot.jobs:
        reason = plan.reason_for(view.job_id)
        stopped = view.running and view.job_id not in plan.run
        if stopped and reason is not None and "reclaim" in reason.code.lower():
            out.append(view)
    return out
