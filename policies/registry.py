"""The policy registry: an explicit name -> factory map.

The CLI (replays, the sandbox), the API (local mode, replays, policy switches), the
what-if replays (controller/whatif.py) and the Kubernetes operator make policies by
name here; an unknown name is an error listing the known ones.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from controller.model import Policy
from policies.edf import Edf
from policies.elasticflow import ElasticFlow
from policies.fifo import Fifo
from policies.gandiva import Gandiva
from policies.gavel import GavelFifo, GavelFtf, GavelLas, GavelMakespan
from policies.optimus import Optimus
from policies.pollux import Pollux
from policies.srtf import Srtf
from policies.tiresias import Tiresias

POLICIES: dict[str, Callable[..., Policy]] = {
    "edf": Edf,
    "elasticflow": ElasticFlow,
    "fifo": Fifo,
    "gandiva": Gandiva,
    "gavel-fifo": GavelFifo,
    "gavel-ftf": GavelFtf,
    "gavel-las": GavelLas,
    "gavel-makespan": GavelMakespan,
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
        checked = _checked_options(factory, options)
        return factory(**checked)
    except (TypeError, ValueError) as exc:
        raise UnknownPolicyError(f"policy {name!r}: bad options {options}: {exc}") from None


def _checked_options(factory: Callable[..., Policy], options: Mapping[str, Any]) -> dict[str, Any]:
    """Options checked against the policy's field types (the policies are dataclasses),
    so that a value of the wrong type (from the CLI or the API) is refused by name
    here, not met later as an arithmetic error: ints stand for floats, lists for
    tuples. Fields of other types (a function) take what they are given."""
    if not dataclasses.is_dataclass(factory):
        return dict(options)
    hints = typing.get_type_hints(factory)
    known = {f.name for f in dataclasses.fields(factory) if f.init}
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key not in known:
            raise TypeError(f"unknown option {key!r} (known: {', '.join(sorted(known))})")
        out[key] = _coerce(key, value, hints[key])
    return out


def _coerce(key: str, value: Any, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        return _coerce(key, value, others[0]) if len(others) == 1 else value
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if hint is float:
        if not number or not math.isfinite(value):
            raise TypeError(f"option {key!r} must be a finite number, not {value!r}")
        return float(value)
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"option {key!r} must be an integer, not {value!r}")
        return value
    if hint in (bool, str):
        if not isinstance(value, hint):
            raise TypeError(f"option {key!r} must be a {hint.__name__}, not {value!r}")
        return value
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if not isinstance(value, list | tuple):
            raise TypeError(f"option {key!r} must be a list, not {value!r}")
        return tuple(_coerce(key, v, args[0]) for v in value)
    if origin is Mapping:
        if not isinstance(value, dict):
            raise TypeError(f"option {key!r} must be a mapping, not {value!r}")
        return {_coerce(key, k, args[0]): _coerce(key, v, args[1]) for k, v in value.items()}
    return value
