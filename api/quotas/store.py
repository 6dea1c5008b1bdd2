"""Where the quotas an admin defines live in cluster mode: the cluster-scoped Quota
resources, so that REST and kubectl meet in the same objects (local mode keeps them in
the job database, api/quotas/tree.py). Called by api/routes/quotas.py.

For the release that still reads the deprecated Queue kind, the store reads what the
operator reads (a Quota, else a Queue of the name: operators/quotas/resources.py), and
a write migrates: a PUT of a name held by a Queue creates its Quota and deletes the
Queue, and a DELETE removes both.
"""

from __future__ import annotations

from api.quotas.tree import Item
from operators.kube import KubeApi, Obj
from operators.quotas.resources import QuotaApi, legacy, list_quotas
from operators.quotas.tree import quota_data, quota_object


class KubeQuotaStore:
    """Cluster mode: the Quota resources (operators/quotas/resources.py), status as the
    operator last wrote it (`statuses`)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.quotas = QuotaApi(api)
        self.legacy = legacy(api)

    def _objects(self) -> list[Obj]:
        return list_quotas(self.api).objects

    def items(self) -> list[Item]:
        return [quota_data(o) for o in self._objects()]

    def statuses(self) -> dict[str, Obj]:
        return {o["metadata"]["name"]: o.get("status") or {} for o in self._objects()}

    def put(self, item: Item) -> bool:
        body = quota_object(item)
        old = self.quotas.get(item["name"])
        if old is not None:
            body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            self.quotas.replace(body)
            return False
        self.quotas.create(body)
        return not self.legacy.delete(item["name"])  # a Queue of the name: migrated

    def delete(self, name: str) -> bool:
        gone = self.quotas.delete(name)
        return self.legacy.delete(name) or gone
