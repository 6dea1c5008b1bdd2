"""The calls on DLJobs and on their CustomResourceDefinition.

`DLJobCalls` (a part of operators.kube.KubeApi) reads, creates, replaces and deletes
DLJobs for the backend, the informers' callers and the API service's cluster mode, and
writes their status through `update_status`: the optimistic-concurrency loop every
status write goes through — the new status is computed from the object as read, sent
with its resourceVersion, and on 409 Conflict computed again from a fresh read.
`apply_crd` installs or replaces a CRD (`gpuflow operator run --install-crd`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes  # type: ignore[import-untyped]

from operators import crd
from operators.kube.calls import KubeCalls, Obj, crd_args, drain, read_json
from operators.kube.errors import ALREADY_EXISTS, CONFLICT, NOT_FOUND, ApiException

STATUS_RETRIES = 8  # status writes that met a conflict, before update_status gives up


class DLJobCalls(KubeCalls):
    """DLJob reads and writes, status writes with conflict retries, CRD installation."""

    def get_dljob(self, namespace: str, name: str) -> Obj:
        fn = self.custom.get_namespaced_custom_object
        with self._call("get", crd.PLURAL):
            return read_json(
                fn(**crd_args(), namespace=namespace, name=name, _preload_content=False)
            )

    def list_dljobs(self, namespace: str) -> tuple[list[Obj], str]:
        fn = self.custom.list_namespaced_custom_object
        with self._call("list", crd.PLURAL):
            data = read_json(fn(**crd_args(), namespace=namespace, _preload_content=False))
        return list(data.get("items") or []), str(data["metadata"].get("resourceVersion", ""))

    def create_dljob(self, namespace: str, body: Obj) -> Obj:
        fn = self.custom.create_namespaced_custom_object
        with self._call("create", crd.PLURAL):
            return read_json(
                fn(**crd_args(), namespace=namespace, body=body, _preload_content=False)
            )

    def delete_dljob(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete a DLJob (its finalizer lets the operator clean up first); False if it
        was gone already or, given `uid`, the name belongs to another DLJob now (the
        API server checks the uid as it deletes: a precondition, 409 if it differs)."""
        fn = self.custom.delete_namespaced_custom_object
        body = None
        if uid is not None:
            body = kubernetes.client.V1DeleteOptions(
                preconditions=kubernetes.client.V1Preconditions(uid=uid)
            )
        try:
            # Read to the end, so that the connection goes back to the pool.
            with self._call("delete", crd.PLURAL):
                read_json(
                    fn(
                        **crd_args(),
                        namespace=namespace,
                        name=name,
                        body=body,
                        _preload_content=False,
                    )
                )
        except ApiException as exc:
            if exc.status == NOT_FOUND or (uid is not None and exc.status == CONFLICT):
                return False
            raise
        return True

    def replace_dljob(self, obj: Obj) -> Obj:
        """Replace a DLJob's metadata and spec (finalizers); needs its resourceVersion."""
        return self._replace(self.custom.replace_namespaced_custom_object, crd.PLURAL, obj)

    def replace_dljob_status(self, obj: Obj) -> Obj:
        fn = self.custom.replace_namespaced_custom_object_status
        return self._replace(fn, f"{crd.PLURAL}/status", obj)

    def _replace(self, fn: Callable[..., Any], resource: str, obj: Obj) -> Obj:
        """PUT `obj` (the DLJob or its status subresource) where its metadata names."""
        meta = obj["metadata"]
        with self._call("update", resource):
            return read_json(
                fn(
                    **crd_args(),
                    namespace=meta["namespace"],
                    name=meta["name"],
                    body=obj,
                    _preload_content=False,
                )
            )

    def update_status(self, obj: Obj, mutate: Callable[[Obj], Obj | None]) -> Obj | None:
        """Write `mutate(obj)`'s status with obj's resourceVersion; on 409 read the
        object afresh and mutate again. `mutate` returns the new object, or None when
        nothing is to change. Returns the stored object (None: unchanged or gone)."""
        meta = obj["metadata"]
        for _ in range(STATUS_RETRIES):
            new = mutate(obj)
            if new is None:
                return None
            try:
                return self.replace_dljob_status(new)
            except ApiException as exc:
                if exc.status == NOT_FOUND:
                    return None
                if exc.status != CONFLICT:
                    raise
            try:
                obj = self.get_dljob(meta["namespace"], meta["name"])
            except ApiException as exc:
                if exc.status == NOT_FOUND:
                    return None
                raise
        raise RuntimeError(f"DLJob {meta['name']}: status kept conflicting")

    def apply_crd(self, body: Obj) -> None:
        """Create a CustomResourceDefinition, or replace the one installed with it
        (`gpuflow operator run --install-crd`)."""
        ext = kubernetes.client.ApiextensionsV1Api(self.client)
        name, res = body["metadata"]["name"], "customresourcedefinitions"
        try:
            with self._call("create", res):
                drain(ext.create_custom_resource_definition(body, _preload_content=False))
            return
        except ApiException as exc:
            if exc.status != ALREADY_EXISTS:
                raise
        with self._call("get", res):
            current = read_json(ext.read_custom_resource_definition(name, _preload_content=False))
        meta = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        with self._call("update", res):
            fn = ext.replace_custom_resource_definition
            drain(fn(name, {**body, "metadata": meta}, _preload_content=False))
