"""`gpuflow policies [--json]`: the registered scheduling policies, their options and defaults.

Registered by gpuflow.cli through `add_parser`. The table has one row per policy:
its name, the one-line summary that opens its module's docstring, and each option
as `key=default`. `--json` prints a list of `{"name", "description", "options":
{key: default}}` objects (defaults as JSON values; tuples as lists; anything else
JSON cannot hold as its repr).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
from collections.abc import Mapping
from typing import Any

# Options are wrapped to this width in the table, so that Pollux's ten fit a terminal.
_OPTIONS_WIDTH = 48
_DESCRIPTION_WIDTH = 60


def add_parser(sub: Any) -> None:
    """Register `policies` on the CLI's subparsers object."""
    p = sub.add_parser("policies", help="list the registered policies and their options")
    p.add_argument("--json", action="store_true", help="one JSON list on stdout")
    p.set_defaults(func=cmd_policies)


def describe_policies() -> list[dict[str, Any]]:
    """Each registered policy, by name: its description and its options' defaults."""
    from policies.registry import POLICIES, policy_names

    return [
        {
            "name": name,
            "description": _description(POLICIES[name]),
            "options": _defaults(POLICIES[name]),
        }
        for name in policy_names()
    ]


def _description(factory: Any) -> str:
    """The first line of the policy's module docstring, without its `Name: ` head.

    The module, not the class: a dataclass without a docstring gets its signature as
    one, and the policies put their summary and paper at the top of the module."""
    doc = sys.modules[factory.__module__].__doc__ or factory.__doc__ or ""
    first = next((line.strip() for line in doc.splitlines() if line.strip()), "")
    head, sep, rest = first.partition(": ")
    return rest if sep and " " not in head.strip() else first


def _defaults(factory: Any) -> dict[str, Any]:
    if not dataclasses.is_dataclass(factory):
        return {}
    out: dict[str, Any] = {}
    for field in dataclasses.fields(factory):
        if not field.init or field.name == "name":
            continue
        if field.default is not dataclasses.MISSING:
            out[field.name] = _json_value(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            out[field.name] = _json_value(field.default_factory())
        else:
            out[field.name] = None
    return out


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    # A function option (Optimus's loss_source) by its name, not its address.
    return getattr(value, "__qualname__", None) or repr(value)


def _shown(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def table(rows: list[dict[str, Any]]) -> str:
    """The policies as a fixed-width table; long cells wrap within their column."""
    name_w = max([len("NAME"), *(len(r["name"]) for r in rows)])
    lines = [f"{'NAME':<{name_w}}  {'DESCRIPTION':<{_DESCRIPTION_WIDTH}}  OPTIONS"]
    for row in rows:
        options = " ".join(f"{k}={_shown(v)}" for k, v in row["options"].items()) or "-"
        desc = textwrap.wrap(row["description"], _DESCRIPTION_WIDTH) or [""]
        opts = textwrap.wrap(options, _OPTIONS_WIDTH, break_on_hyphens=False)
        for i in range(max(len(desc), len(opts))):
            name = row["name"] if i == 0 else ""
            d = desc[i] if i < len(desc) else ""
            o = opts[i] if i < len(opts) else ""
            lines.append(f"{name:<{name_w}}  {d:<{_DESCRIPTION_WIDTH}}  {o}".rstrip())
    return "\n".join(lines) + "\n"


def cmd_policies(args: argparse.Namespace) -> int:
    rows = describe_policies()
    sys.stdout.write(json.dumps(rows) + "\n" if args.json else table(rows))
    return 0
