"""The Secret that carries a job's metrics token to its worker pods, in cluster mode.

`<dljob>-gpuflow-metrics` (operators.dljobs.resources.metrics_secret_name), key `token`,
in the DLJob's namespace, labelled gpuflow.dev/job, owned by the DLJob (the garbage
collector deletes it with the job). The operator puts it into every worker
container as GPUFLOW_METRICS_TOKEN (operators/pods/__init__.py); the API stores only the
token's hash. Called by api.cluster_mode.backend's `ClusterModeBackend` for REST jobs (`create`
before the DLJob exists, so that no pod starts without it, then `set_owner`), and by
api.cluster_mode.adoption for DLJobs made with kubectl (`adopt`, at the follower's first
sight).
"""

from __future__ import annotations

import base64
import copy

from api.http.security import new_token
from operators import crd
from operators.dljobs.resources import METRICS_SECRET_KEY, metrics_secret_name
from operators.kube import KubeApi, Obj
from operators.pods import owner_reference


def manifest(namespace: str, dljob_name: str, token: str, owner: Obj | None = None) -> Obj:
    meta: Obj = {
        "name": metrics_secret_name(dljob_name),
        "namespace": namespace,
        "labels": {crd.LABEL_JOB: dljob_name},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner, controller=False)]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": meta,
        "data": {METRICS_SECRET_KEY: base64.b64encode(token.encode()).decode()},
    }


def token_of(secret: Obj) -> str | None:
    data = (secret.get("data") or {}).get(METRICS_SECRET_KEY)
    return base64.b64decode(data).decode() if data else None


def create(api: KubeApi, namespace: str, dljob_name: str, token: str) -> None:
    """The Secret of a REST job whose DLJob is not created yet (one left from an
    earlier try of the same job is replaced)."""
    body = manifest(namespace, dljob_name, token)
    if api.create_secret(namespace, body) is None:
        old = api.get_secret(namespace, metrics_secret_name(dljob_name))
        if old is None:
            api.create_secret(namespace, body)
        else:
            api.replace_secret({**body, "metadata": {**body["metadata"], **_rv(old)}})


def set_owner(api: KubeApi, dljob: Obj) -> None:
    """Make the DLJob the owner of its Secret, once the DLJob exists."""
    meta = dljob["metadata"]
    secret = api.get_secret(meta["namespace"], metrics_secret_name(meta["name"]))
    if secret is None:
        return
    new = copy.deepcopy(secret)
    new["metadata"]["ownerReferences"] = [owner_reference(dljob, controller=False)]
    api.replace_secret(new)


def adopt(api: KubeApi, dljob: Obj) -> str:
    """The metrics token of a DLJob made with kubectl: a new one in a new Secret, or
    the one its Secret already holds (another API replica, or an earlier try whose
    database write failed, made it first: all then store the same token)."""
    meta = dljob["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    token = new_token()
    body = manifest(namespace, name, token, owner=dljob)
    if api.create_secret(namespace, body) is not None:
        return token
    old = api.get_secret(namespace, metrics_secret_name(name))
    if old is None:  # deleted meanwhile
        api.create_secret(namespace, body)
        return token
    owners = {r.get("uid") for r in old["metadata"].get("ownerReferences") or []}
    kept = token_of(old)
    if meta["uid"] in owners and kept:
        return kept
    # A Secret of an earlier DLJob of the same name (not yet collected), or not ours.
    api.replace_secret({**body, "metadata": {**body["metadata"], **_rv(old)}})
    return token


def _rv(obj: Obj) -> dict[str, str]:
    return {"resourceVersion": str(obj["metadata"]["resourceVersion"])}
