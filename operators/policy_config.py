"""The scheduling policy an admin chose, kept in a ConfigMap's `data.policy`, and its
options in `data.options`.

The API writes the name (PUT /api/v1/policies/active in cluster mode,
api/routes/policies.py) with `write_policy`; an admin writes the options with kubectl,
one `[POLICY:]KEY=VALUE` a line as `gpuflow operator run --policy-opt` takes them
(policies/option_text.py: the same syntax and value parsing; blank lines and `#`
comments skipped). The operator reads both with `PolicyWatch.changed` at the start of
each round, at most every `every_s`, parses the options with `parse_options`, and
swaps its policy when the name or the options in effect changed (operators/operator.py). A
missing ConfigMap, a name the registry does not know, or options that do not parse or
that the policy refuses, leave the policy the operator runs (its --policy flag's, or
the last one read).

The leading operator writes back what it runs, from its first round and after each
switch, with `publish_running`: `data.running` (the policy's name) and
`data.runningOptions` (the options in effect, a JSON object), so that the API shows the
policy and options in force before any admin has chosen one (`read_running`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from operators.kube import CONFLICT, ApiException, KubeApi, Obj
from policies.option_text import parse_item, parse_value

CONFIGMAP = "gpuflow-policy"
KEY = "policy"
OPTIONS_KEY = "options"
RUNNING_KEY = "running"  # written by the operator: the policy it runs
RUNNING_OPTIONS_KEY = "runningOptions"  # and its options in effect, as a JSON object
CONFLICT_TRIES = 3  # a replace refused because another writer changed it: read again


@dataclass(frozen=True)
class PolicyChoice:
    """What the ConfigMap holds: the policy's name and its options' text."""

    name: str
    options: str = ""


def parse_options(text: str, name: str = CONFIGMAP) -> tuple[tuple[str, str, Any], ...]:
    """`data.options` as (policy or "" for any, key, value), each value parsed as
    --policy-opt's; ValueError naming the ConfigMap, data.options and the line."""
    out: list[tuple[str, str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        try:
            scope, key, raw = parse_item(item)
            out.append((scope, key, parse_value(key, raw)))
        except ValueError as exc:
            raise ValueError(f"ConfigMap {name} data.{OPTIONS_KEY} line {number}: {exc}") from None
    return tuple(out)


@dataclass(frozen=True)
class RunningPolicy:
    """What the leading operator runs: the policy's name and its options in effect."""

    name: str
    options: dict[str, Any]


def read_choice(api: KubeApi, namespace: str, name: str = CONFIGMAP) -> PolicyChoice | None:
    """The policy and options text the ConfigMap holds, or None (no ConfigMap, no
    policy key)."""
    obj = api.get_configmap(namespace, name)
    if obj is None:
        return None
    data = obj.get("data") or {}
    policy = data.get(KEY)
    if not policy:
        return None
    return PolicyChoice(str(policy), str(data.get(OPTIONS_KEY) or ""))


def read_policy(api: KubeApi, namespace: str, name: str = CONFIGMAP) -> str | None:
    """The policy name the ConfigMap holds, or None (no ConfigMap, no key)."""
    choice = read_choice(api, namespace, name)
    return None if choice is None else choice.name


def read_running(api: KubeApi, namespace: str, name: str = CONFIGMAP) -> RunningPolicy | None:
    """The policy the operator last said it runs, or None (no ConfigMap, or no operator
    has led a round since it was made). Options that are not a JSON object read as
    none."""
    obj = api.get_configmap(namespace, name)
    data = (obj or {}).get("data") or {}
    running = data.get(RUNNING_KEY)
    if not running:
        return None
    try:
        options = json.loads(data.get(RUNNING_OPTIONS_KEY) or "{}")
    except ValueError:
        options = {}
    return RunningPolicy(str(running), options if isinstance(options, dict) else {})


def write_policy(
    api: KubeApi,
    namespace: str,
    policy: str,
    name: str = CONFIGMAP,
    options: str | None = None,
) -> None:
    """Set the ConfigMap's policy, and its options where given (else kept), in one
    write, creating the ConfigMap if there is none."""
    choice = {KEY: policy} if options is None else {KEY: policy, OPTIONS_KEY: options}
    _merge(api, namespace, name, choice)


def publish_running(
    api: KubeApi, namespace: str, running: RunningPolicy, name: str = CONFIGMAP
) -> None:
    """The operator's side: say which policy it runs and with which options (a value
    JSON cannot hold is written as its text), keeping the admin's choice."""
    options = json.dumps(running.options, sort_keys=True, default=str)
    _merge(api, namespace, name, {RUNNING_KEY: running.name, RUNNING_OPTIONS_KEY: options})


def _merge(api: KubeApi, namespace: str, name: str, values: dict[str, str]) -> None:
    """Set these keys of the ConfigMap's data, keeping the others, creating the
    ConfigMap if there is none; a write that lost a race is read and tried again."""
    for _ in range(CONFLICT_TRIES):
        obj = api.get_configmap(namespace, name)
        if obj is None:
            body: Obj = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": values,
            }
            if api.create_configmap(namespace, body) is not None:
                return
            continue  # created meanwhile: replace it
        obj["data"] = {**(obj.get("data") or {}), **values}
        try:
            api.replace_configmap(obj)
            return
        except ApiException as exc:
            if exc.status != CONFLICT:
                raise
    raise RuntimeError(f"ConfigMap {namespace}/{name}: kept changing")


class PolicyWatch:
    """The operator's side: the ConfigMap's choice when it changed since last read."""

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
        self._seen: PolicyChoice | None = None

    @property
    def seen(self) -> PolicyChoice | None:
        """The ConfigMap's choice at the last read that found one."""
        return self._seen

    def changed(self) -> PolicyChoice | None:
        """The ConfigMap's policy and options if either differs from the last read
        (None: not time to read, no ConfigMap, or no change)."""
        now = self._clock()
        if now - self._last_read < self.every_s:
            return None
        self._last_read = now
        choice = read_choice(self.api, self.namespace, self.name)
        if choice is None or choice == self._seen:
            return None
        self._seen = choice
        return choice
