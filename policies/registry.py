"""The policy registry: an explicit name -> factory map.

The CLI, the simulator and (later) the operator make policies by name here; an
unknown name is an error listing the known ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.model import Policy
from policies.fifo import Fifo
from policies.gandiva import Gandiva
from policies.optimus import Optimus
from policies.pollux import Pollux
from policies.srtf import Srtf
from policies.tiresias import Tiresias

POLICIES: dict[str, Callable[..., Policy]] = {
    "fifo": Fifo,
    "gandiva": Gandiva,
    "optimus": Optimus,
    "pollux": Pollux,
    "srtf": Srtf,
    "tiresias": Tiresias,
}


class UnknownPolicyError(ValueError):
    """An unknown policy name, or options the policy refuses."""


def policy_names() -> list[str]:
    return sorted(POLICIES)


def make_policy(name: str, **options: Any) -> Policy:
    """A policy by registered name, with its options (keyword arguments)."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r} (known: {', '.join(policy_names())})"
        ) from None
    try:
        return factory(**options)
    except (TypeError, ValueError) as exc:
        raise UnknownPolicyError(f"policy {name!r}: bad options {options}: {exc}") from None
