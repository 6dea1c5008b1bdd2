"""Refusals on cue from the real kube-apiserver, for tests that need Kubernetes to say
no to one kind of request for as long as they choose (the API's reaper outlasting
refused DLJob deletes, a submission whose Secret or DLJob is refused).

`AdmissionRefusal` creates a ValidatingAdmissionPolicy whose one rule is false for an
operation on a resource; while its binding exists the API server's admission refuses
every such request with 403 Forbidden. Admission picks up a policy and its binding a
moment after they are written, so `refuse` and `allow` return once a dry-run request
(the `probe` they are given, which admission sees as it sees a real one, and which
stores nothing) is refused, or admitted again. A DELETE reaches admission only for an
object that exists, so its probe names one. Used by tests/api/test_cluster_cancel.py and
tests/api/test_train_status.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes  # type: ignore[import-untyped]

from operators.kube import NOT_FOUND, ApiException
from tests.waiting import wait_for

FORBIDDEN = 403
TIMEOUT_S = 30.0


class AdmissionRefusal:
    """Requests of `operation` (CREATE, UPDATE, DELETE) on `resource` of API `group`
    refused from refuse() to allow()."""

    def __init__(self, client: Any, operation: str, group: str, resource: str) -> None:
        self.admission = kubernetes.client.AdmissionregistrationV1Api(client)
        self._probe: Callable[[], Any] | None = None  # the last refuse()'s
        self.name = f"gpuflow-test-refuse-{operation.lower()}-{resource}"
        rule = {"apiGroups": [group], "apiVersions": ["*"], "operations": [operation],
                "resources": [resource]}  # fmt: skip
        refusal = {"expression": "false", "reason": "Forbidden",
                   "message": f"{operation} {resource}: refused by the test"}  # fmt: skip
        spec = {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [rule]},
                "validations": [refusal]}  # fmt: skip
        self.admission.create_validating_admission_policy(
            {"metadata": {"name": self.name}, "spec": spec}
        )

    def refuse(self, probe: Callable[[], Any]) -> None:
        """Bind the policy; back once `probe` (one such request, dryRun=All) is refused."""
        spec = {"policyName": self.name, "validationActions": ["Deny"]}
        self.admission.create_validating_admission_policy_binding(
            {"metadata": {"name": self.name}, "spec": spec}
        )
        self._probe = probe
        wait_for(f"{self.name} in effect", lambda: not admitted(probe), TIMEOUT_S)

    def allow(self, probe: Callable[[], Any]) -> None:
        """Unbind it; back once `probe` is admitted, or its object is gone (a delete
        the test waits for, got through the moment the binding went)."""
        self.admission.delete_validating_admission_policy_binding(self.name)
        self._probe = None
        wait_for(f"{self.name} gone", lambda: admitted(probe, gone_too=True), TIMEOUT_S)

    def close(self) -> None:
        """Remove the binding and the policy; if still bound, back once the last
        refuse()'s probe is admitted (or its object is gone), so that what runs next
        (the test's reset) is not refused."""
        for delete in (
            self.admission.delete_validating_admission_policy_binding,
            self.admission.delete_validating_admission_policy,
        ):
            try:
                delete(self.name)
            except ApiException as exc:
                if exc.status != NOT_FOUND:
                    raise
        probe, self._probe = self._probe, None
        if probe is not None:
            wait_for(f"{self.name} gone", lambda: admitted(probe, gone_too=True), TIMEOUT_S)


def admitted(probe: Callable[[], Any], gone_too: bool = False) -> bool:
    """Whether `probe` got past admission (False: 403 Forbidden); with `gone_too`, a
    probe whose object is gone (404) counts as admitted."""
    try:
        probe()
    except ApiException as exc:
        if gone_too and exc.status == NOT_FOUND:
            return True
        if exc.status != FORBIDDEN:
            raise
        return False
    return True
