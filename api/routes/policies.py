"""Scheduling policies: the registry, the active one, switching (admins only)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError

from api.deps import AdminUser, CurrentUser, LocalDep
from api.schemas.cluster import PoliciesPublic, PolicyPublic, PolicySwitch
from policies.registry import POLICIES, UnknownPolicyError, make_policy, policy_names

router = APIRouter(prefix="/policies", tags=["policies"])


def _public(name: str, active: str) -> PolicyPublic:
    doc = (POLICIES[name].__doc__ or "").strip().splitlines()
    return PolicyPublic(name=name, description=doc[0] if doc else "", active=name == active)


@router.get("", response_model=PoliciesPublic)
def list_policies(user: CurrentUser, local: LocalDep) -> PoliciesPublic:
    data = [_public(n, local.live.policy_name) for n in policy_names()]
    return PoliciesPublic(data=data, count=len(data))


@router.get("/active", response_model=PolicyPublic)
def active_policy(user: CurrentUser, local: LocalDep) -> PolicyPublic:
    return _public(local.live.policy_name, local.live.policy_name)


@router.put("/active", response_model=PolicyPublic, responses={403: {}})
def switch_policy(body: PolicySwitch, user: AdminUser, local: LocalDep) -> PolicyPublic:
    """Switch the scheduling policy; the next round decides with it."""
    try:
        policy = make_policy(body.name)
    except UnknownPolicyError as exc:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "name"),
                    "type": "value_error",
                    "msg": str(exc),
                    "input": body.name,
                }
            ]
        ) from None
    local.live.set_policy(policy)
    return _public(policy.name, local.live.policy_name)
