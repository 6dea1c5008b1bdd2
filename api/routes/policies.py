"""Scheduling policies: the registry, the active one, switching (admins only).

Local mode: the LiveCluster's policy, switched in place. Cluster mode: the policy an
admin chose lives in ConfigMap `gpuflow-policy` (settings.kube_namespace, which must
be the operator's namespace); the operator reads it each round and swaps its policy,
and writes back the policy and options it runs (operators/policy_config.py), which
are the active ones here (api.cluster_mode.backend.ClusterModeBackend.running_policy). Before the
operator's first round, the active policy is "unknown".
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from api.backends import BackendUnavailable, JobBackend, LocalBackend
from api.deps import AdminUser, BackendDep, CurrentUser
from api.field_errors import invalid
from api.http.errors import unavailable
from api.schemas.cluster import PoliciesPublic, PolicyPublic, PolicySwitch
from policies.registry import POLICIES, UnknownPolicyError, make_policy, policy_names

router = APIRouter(prefix="/policies", tags=["policies"])
UNKNOWN = "unknown"


def _public(name: str, active: str, options: dict[str, Any] | None = None) -> PolicyPublic:
    doc = (POLICIES[name].__doc__ or "").strip().splitlines() if name in POLICIES else []
    return PolicyPublic(
        name=name,
        description=doc[0] if doc else "",
        active=name == active,
        options=options if name == active else None,
    )


def active_policy_of(request: Request) -> tuple[str, dict[str, Any] | None] | None:
    """The policy the backend runs and its options (None: not known), or None if
    unknown or there is no backend. Blocking in cluster mode (a Kubernetes GET at most
    every api.cluster_mode.backend.POLICY_READ_S)."""
    backend: JobBackend | None = request.app.state.backend
    if backend is None:
        return None
    if isinstance(backend, LocalBackend):
        return backend.local.live.policy_name, {}  # local mode takes no policy options
    from api.cluster_mode.backend import ClusterModeBackend
    from operators.kube import API_ERRORS

    assert isinstance(backend, ClusterModeBackend)
    try:
        running = backend.running_policy()
    except API_ERRORS as exc:
        raise BackendUnavailable(f"Kubernetes API: policy ConfigMap: {exc}") from None
    return None if running is None else (running.name, running.options)


def active_policy_name(request: Request) -> str | None:
    """The name of the policy the backend runs, None if unknown (active_policy_of)."""
    active = active_policy_of(request)
    return None if active is None else active[0]


@router.get("", response_model=PoliciesPublic)
async def list_policies(request: Request, user: CurrentUser, backend: BackendDep) -> PoliciesPublic:
    active = await run_in_threadpool(active_policy_of, request)
    name, options = active or (UNKNOWN, None)
    data = [_public(n, name, options) for n in policy_names()]
    return PoliciesPublic(data=data, count=len(data))


@router.get("/active", response_model=PolicyPublic)
async def active_policy(request: Request, user: CurrentUser, backend: BackendDep) -> PolicyPublic:
    active = await run_in_threadpool(active_policy_of, request)
    name, options = active or (UNKNOWN, None)
    return _public(name, name, options)


@router.put("/active", response_model=PolicyPublic, responses={403: {}})
def switch_policy(body: PolicySwitch, user: AdminUser, backend: BackendDep) -> PolicyPublic:
    """Switch the scheduling policy; the next round decides with it (cluster mode: the
    operator's next round after it reads the ConfigMap, within a few seconds)."""
    try:
        policy = make_policy(body.name)
    except UnknownPolicyError as exc:
        raise invalid(("body", "name"), str(exc), body.name) from None
    if isinstance(backend, LocalBackend):
        backend.local.set_policy(policy, user.name)
        return _public(policy.name, backend.local.live.policy_name)
    from api.cluster_mode.backend import ClusterModeBackend
    from operators.kube import API_ERRORS
    from operators.policy_config import write_policy

    if not isinstance(backend, ClusterModeBackend):
        raise unavailable("no cluster backend running")
    try:
        write_policy(backend.api, backend.namespace, policy.name)
    except (*API_ERRORS, RuntimeError) as exc:
        raise BackendUnavailable(f"Kubernetes API: policy ConfigMap: {exc}") from None
    return _public(policy.name, policy.name)
