"""Policy options written as text: `[POLICY:]KEY=VALUE` items and their values.

The one syntax every place that takes a policy's options as text shares: the CLI's
`--policy-opt` (gpuflow/options.py, for replay, compare, sandbox and operator run) and
the operator's policy ConfigMap (operators/policy_config.py, `data.options`). Here in
policies/, beside the registry that checks the parsed values against each policy's
fields, so that both callers import it downwards. Errors are ValueError; each caller
puts its own prefix (the option, or the ConfigMap's line) before the message.
`options_for` picks the items that apply to one policy: the operator's config and
its ConfigMap switch (operators/operator.py) and the sandbox's up-front check.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

# 18 digits hold any count, seed or threshold a user means and still fit an int64;
# more is a typo or an attack (also the CLI's bound on integers, gpuflow/options.py).
MAX_INTEGER_DIGITS = 18


def parse_item(item: str) -> tuple[str, str, str]:
    """`[POLICY:]KEY=VALUE` as (policy or "" for any, key, value text); ValueError
    "'<item>': expected [POLICY:]KEY=VALUE" when it is not of that form."""
    # The scope is read before the first "=" only: a JSON value holds colons of its own.
    head, sep, value = item.partition("=")
    scope, _, key = head.rpartition(":")
    if not sep or not key:
        raise ValueError(f"{item!r}: expected [POLICY:]KEY=VALUE")
    return scope.strip(), key.strip(), value.strip()


def parse_value(key: str, raw: str) -> Any:
    """An option's value: JSON where it parses (numbers, lists, booleans), else the
    text itself; ValueError "<key>: <why>" for an integer past MAX_INTEGER_DIGITS or a
    value nested too deeply. NaN and infinities are left to the policy's checks."""
    try:
        return json.loads(raw, parse_int=_json_integer)
    except json.JSONDecodeError:
        return raw
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ValueError(f"{key}: {reason}") from None


def _json_integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ValueError(f"an integer of more than {MAX_INTEGER_DIGITS} digits")
    return int(text)


def options_for(scoped: Iterable[tuple[str, str, Any]], policy: str) -> dict[str, Any]:
    """The (scope, key, value) options that apply to `policy`: those for any policy
    (scope "") and those scoped to it, as its keyword arguments (a later item wins)."""
    return {k: v for scope, k, v in scoped if scope in ("", policy)}
