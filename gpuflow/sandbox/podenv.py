"""A pod's container environment and command line as a local process sees them.

The sandbox's ProcessKubelet (kubelet.py) calls `process_env` and `command_line`
when it starts a pod. What a real kubelet does and how it is emulated:

- literal `value`s, with `$(VAR)` references to earlier variables expanded (`$$(VAR)`
  stays literal), in the env and in command and args;
- `valueFrom`: `secretKeyRef` and `configMapKeyRef` read from the API server (an
  `optional` reference that is missing leaves the variable out; a required one is
  an `EnvError`: the pod waits with reason CreateContainerConfigError, as a real
  kubelet keeps it); `fieldRef` metadata.name/namespace/uid, labels['k'],
  annotations['k'], spec.nodeName, spec.serviceAccountName, status.podIP,
  status.hostIP;
- not emulated: `resourceFieldRef` (left out, a warning), `envFrom`, the image's own
  env and entrypoint (a container without `command` cannot run), the
  KUBERNETES_SERVICE_* variables.

Two rewrites follow because a process sees neither mounts nor cluster DNS: a value
that starts with a volume's mountPath points at the volume's host directory, and a
cluster DNS name (`<pod>.<svc>.<ns>.svc[.cluster.local]`, e.g. MASTER_ADDR) becomes
that pod's own IP as the kubelet's resolver finds it (as root each pod has an address
of its own, network.py; else every pod is 127.0.0.1).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuflow.sandbox.volumes import Mounts, render_field

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# (kind "secrets"|"configmaps", namespace, name) -> the object, or None if missing.
Lookup = Callable[[str, str, str], Obj | None]
# (namespace, pod name) -> the IP the pod has, or None.
PodIpResolver = Callable[[str, str], str | None]

# What a process inherits from the sandbox: enough to find programs and the venv.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "TZ")
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SVC_NAME = re.compile(r"([a-z0-9-]+)\.[a-z0-9-]+\.([a-z0-9-]+)\.svc(\.cluster\.local)?\.?")


class EnvError(ValueError):
    """A required env source is missing: the container cannot be configured."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names replaced, `$$` an escaped `$`,
    unknown references left as they are."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


def _from_source(pod: Obj, ref: Obj, lookup: Lookup, pod_ip: str, host_ip: str) -> str | None:
    ns = (pod.get("metadata") or {}).get("namespace", "default")
    for key, kind in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
        if key not in ref:
            continue
        src, optional = ref[key], bool(ref[key].get("optional"))
        obj = lookup(kind, ns, str(src.get("name", "")))
        data = _data(obj) if obj is not None else {}
        if src.get("key") in data:
            return data[src["key"]]
        if optional:
            return None
        what = "secret" if kind == "secrets" else "configmap"
        raise EnvError(f'{what} "{src.get("name")}" has no key "{src.get("key")}" (or is missing)')
    if "fieldRef" in ref:
        path = str(ref["fieldRef"].get("fieldPath", ""))
        if path == "status.podIP":
            return pod_ip
        if path == "status.hostIP":
            return host_ip
        return render_field(pod, path)
    log.warning("env source not emulated: %s", ", ".join(ref))
    return None


def _data(obj: Obj) -> dict[str, str]:
    """A Secret's or ConfigMap's values as text (a Secret's `data` is base64)."""
    out = {str(k): str(v) for k, v in (obj.get("stringData") or {}).items()}
    if obj.get("kind") == "Secret":
        for k, v in (obj.get("data") or {}).items():
            out.setdefault(str(k), base64.b64decode(str(v)).decode("utf-8", "replace"))
    else:
        out.update({str(k): str(v) for k, v in (obj.get("data") or {}).items()})
    return out


def rewrite_dns(value: str, namespace: str, resolve: PodIpResolver) -> str:
    """A pod's cluster DNS name (`<pod>.<svc>.<ns>.svc`) replaced by its IP; other
    values unchanged. There is no cluster DNS in the sandbox."""
    m = _SVC_NAME.fullmatch(value)
    if not m:
        return value
    ip = resolve(m.group(2) or namespace, m.group(1))
    return ip if ip is not None else value


def process_env(
    pod: Obj,
    container: Obj,
    *,
    lookup: Lookup,
    pod_ip: str,
    host_ip: str | None = None,
    mounts: Mounts,
    resolve: PodIpResolver,
) -> dict[str, str]:
    """The environment of the process that plays `container` of `pod`; `host_ip` is
    the node's address (None: the pod's, as with hostNetwork)."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace", "default"))
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = str(item["name"])
        if "valueFrom" in item:
            value = _from_source(pod, item["valueFrom"], lookup, pod_ip, host_ip or pod_ip)
            if value is None:
                continue
        else:
            value = expand(str(item.get("value", "")), env)
        env[name] = value
    env = {k: rewrite_dns(mounts.rewrite(v), ns, resolve) for k, v in env.items()}
    base = {k: os.environ[k] for k in INHERITED if k in os.environ}
    base["HOSTNAME"] = str((pod.get("spec") or {}).get("hostname") or meta.get("name", ""))
    return {**base, **env}


def command_line(container: Obj, env: Mapping[str, str]) -> list[str]:
    """The container's command and args with `$(VAR)` expanded; a leading `python` or
    `python3` is the sandbox's own interpreter (the venv with the project installed).
    An EnvError if there is no command: the image's entrypoint is not known here."""
    command = [str(c) for c in container.get("command") or []]
    if not command:
        raise EnvError("no command: the sandbox runs the container's command, not its image")
    argv = [expand(a, env) for a in [*command, *(str(a) for a in container.get("args") or [])]]
    if Path(argv[0]).name in ("python", "python3"):
        argv[0] = sys.executable
    return argv
