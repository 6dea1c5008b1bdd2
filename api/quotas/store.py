"""Where the queues an admin defines live in cluster mode: the cluster-scoped Queue
resources, so that REST and kubectl meet in the same objects (local mode keeps them in
the job database, api/quotas/tree.py). Called by api/routes/quotas.py.
"""

from __future__ import annotations

from api.quotas.tree import Item
from operators import crd
from operators.kube import KubeApi, Obj, Resource
from operators.quotas.resources import QueueApi
from operators.quotas.tree import queue_data, queue_object


class KubeQueueStore:
    """Cluster mode: the Queue resources (operators/quotas/resources.py), status as the
    operator last wrote it (`statuses`)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.queues = QueueApi(api)

    def _objects(self) -> list[Obj]:
        objs, _ = self.api.list_objects(Resource(crd.QUEUE_PLURAL))
        return sorted(objs, key=lambda o: str(o["metadata"]["name"]))

    def items(self) -> list[Item]:
        return [queue_data(o) for o in self._objects()]

    def statuses(self) -> dict[str, Obj]:
        return {o["metadata"]["name"]: o.get("status") or {} for o in self._objects()}

    def put(self, item: Item) -> bool:
        body = queue_object(item)
        old = self.queues.get(item["name"])
        if old is None:
            self.queues.create(body)
            return True
        body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        self.queues.replace(body)
        return False

    def delete(self, name: str) -> bool:
        return self.queues.delete(name)
