"""The scheduling policy an admin chose, kept in a ConfigMap's `data.policy`.

The API writes it (PUT /api/v1/policies/active in cluster mode, api/routes/policies.py)
with `write_policy`; the operator reads it with `PolicyWatch.changed` at the start of
each round, at most every `every_s`, and swaps its policy when the name changed
(operators/operator.py). A missing ConfigMap, or a name the registry does not know,
leaves the policy the operator runs (its --policy flag's, or the last one read).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from operators.kube import CONFLICT, ApiException, KubeApi, Obj

CONFIGMAP = "gpuflow-policy"
KEY = "policy"
CONFLICT_TRIES = 3  # a replace refused because another writer changed it: read again


def read_policy(api: KubeApi, namespace: str, name: str = CONFIGMAP) -> str | None:
    """The policy name the ConfigMap holds, or None (no ConfigMap, no key)."""
    obj = api.get_configmap(namespace, name)
    if obj is None:
        return None
    value = (obj.get("data") or {}).get(KEY)
    return str(value) if value else None


def write_policy(api: KubeApi, namespace: str, policy: str, name: str = CONFIGMAP) -> None:
    """Set the ConfigMap's policy, creating the ConfigMap if there is none."""
    for _ in range(CONFLICT_TRIES):
        obj = api.get_configmap(namespace, name)
        if obj is None:
            body: Obj = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": {KEY: policy},
            }
            if api.create_configmap(namespace, body) is not None:
                return
            continue  # created meanwhile: replace it
        obj["data"] = {**(obj.get("data") or {}), KEY: policy}
        try:
            api.replace_configmap(obj)
            return
        except ApiException as exc:
            if exc.status != CONFLICT:
                raise
    raise RuntimeError(f"ConfigMap {namespace}/{name}: kept changing")


class PolicyWatch:
    """The operator's side: the ConfigMap's policy when it changed since last read."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str = CONFIGMAP,
        *,
        every_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.every_s = every_s
        self._clock = clock
        self._last_read = -float("inf")
        self._seen: str | None = None

    def changed(self) -> str | None:
        """The policy named in the ConfigMap if it differs from the last one read
        (None: not time to read, no ConfigMap, or no change)."""
        now = self._clock()
        if now - self._last_read < self.every_s:
            return None
        self._last_read = now
        policy = read_policy(self.api, self.namespace, self.name)
        if policy is None or policy == self._seen:
            return None
        self._seen = policy
        return policy
