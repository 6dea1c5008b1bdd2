"""From the deprecated Queue kind to Quota: each Queue object copied to a Quota of the
same name, spec, labels and annotations, and with `delete` the Queues removed once
their Quotas hold the same spec. Called by `gpuflow quotas migrate`
(gpuflow/quotas_cmd.py); docs/quotas.md, "From Queue to Quota".

It runs while the operator runs: the operator reads both kinds (a Quota wins over a
Queue of its name, operators/quotas/resources.py), so the tree it applies is the same
before, during and after the copy, and it writes the new Quotas' status next round.
Run again, it changes nothing (`unchanged`); a Quota of the name with another spec is
left as it is (`conflict`: the admin's newer word) and its Queue is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operators import crd
from operators.kube import KubeApi
from operators.quotas.resources import QuotaApi, legacy, list_kind

Obj = dict[str, Any]

CREATED = "created"
UNCHANGED = "unchanged"
CONFLICT = "conflict"
# kubectl apply's record of the manifest it applied names the Queue kind: a later
# `kubectl apply` of a Quota manifest would diff against it, so the copy goes without.
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class Migrated:
    """One Queue's outcome: `result` one of created, unchanged, conflict; `deleted`
    when the Queue was removed (with `delete`, never for a conflict)."""

    name: str
    result: str
    deleted: bool

    def line(self, dry_run: bool) -> str:
        """kubectl's wording: `quota.gpuflow.dev/team-a created`."""
        what = f"quota.{crd.GROUP}/{self.name} {self.result}"
        if self.result == CONFLICT:
            what += ": a Quota of this name has another spec; the Queue is kept"
        if dry_run:
            what += " (dry run)"
        gone = f", queue.{crd.GROUP}/{self.name} deleted" if self.deleted else ""
        return what + gone


def copy_of(queue: Obj) -> Obj:
    """The Quota a Queue becomes: its name, labels, annotations and spec."""
    meta = queue["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != _LAST_APPLIED}
    new_meta: Obj = {"name": meta["name"]}
    if meta.get("labels"):
        new_meta["labels"] = dict(meta["labels"])
    if annotations:
        new_meta["annotations"] = annotations
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.QUOTA_KIND,
        "metadata": new_meta,
        "spec": dict(queue.get("spec") or {}),
    }


def migrate(kube: KubeApi, *, delete: bool = False, dry_run: bool = False) -> list[Migrated]:
    """Copy every Queue to a Quota, in name order; with `delete`, remove each Queue
    whose Quota now holds its spec. `dry_run` says what would be done and does nothing.

    Raises MissingQuotaCrd when the server does not serve Quotas (the CRD is applied
    first); API errors are the caller's (KubeApi logged them)."""
    if list_kind(kube, crd.QUOTA_PLURAL) is None:
        raise MissingQuotaCrd()
    queues, quotas = legacy(kube), QuotaApi(kube)
    out = []
    old = list_kind(kube, crd.LEGACY_QUEUE_PLURAL) or []  # no Queue CRD: nothing to do
    for queue in sorted(old, key=lambda o: str(o["metadata"]["name"])):
        name = str(queue["metadata"]["name"])
        want = copy_of(queue)
        have = quotas.get(name)
        if have is None:
            result = CREATED
            if not dry_run:
                quotas.create(want)
        else:
            result = UNCHANGED if (have.get("spec") or {}) == want["spec"] else CONFLICT
        deleted = delete and result != CONFLICT
        if deleted and not dry_run:
            queues.delete(name)
        out.append(Migrated(name, result, deleted))
    return out


class MissingQuotaCrd(Exception):
    """The server does not serve the Quota kind: nothing can be migrated to it."""

    def __init__(self) -> None:
        super().__init__(
            f"the Quota CRD is not installed: kubectl apply -f helm/gpuflow/crds/"
            f"{crd.QUOTA_CRD_PATH.name} (helm upgrade does not add CRDs), then run this again"
        )
