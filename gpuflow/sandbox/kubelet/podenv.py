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
- `envFrom`: every key of a `configMapRef` or `secretRef`, with the `prefix` (any key
  the API server accepts is a variable name under 1.34's relaxed rule), before `env`
  (which overrides it); a missing source is an EnvError unless `optional`;
- the API server's address as a real kubelet gives it: KUBERNETES_SERVICE_HOST and
  KUBERNETES_SERVICE_PORT (`service_env`, the kubelet's; an `env` item overrides);
- the image: its entrypoint and working directory are known for one image only, the
  chart's (`gpuflow[:tag]`, the Dockerfile's): a container of it without `command` runs
  the entrypoint `gpuflow`, and its WORKDIR /app is this checkout (`command_line`);
  a program of the venv (`gpuflow`, `alembic`, `celery`, `python`) is the venv's own.
  Any other image's container without `command` cannot run; the image's own env is
  not known;
- not emulated: `resourceFieldRef` (left out, a warning), the other Services'
  *_SERVICE_HOST variables.

Rewrites follow because a process sees neither mounts nor cluster DNS: a value
that starts with a volume's mountPath points at the volume's host directory, a
cluster DNS name (`<pod>.<svc>.<ns>.svc[.cluster.local]`, e.g. MASTER_ADDR) becomes
that pod's own IP as the kubelet's resolver finds it (as root each pod has an address
of its own, network.py; else every pod is 127.0.0.1), and an http(s) URL to a
Service (`http://<svc>.<ns>.svc:<port>/...`, e.g. the GPUFLOW_API_URL the chart's
operator gives its workers) points at a ready pod behind the Service and its target
port (`rewrite_service_url`), as kube-proxy would route it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuflow.sandbox.kubelet.volumes import Lookup, Mounts, object_data, render_field

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# (namespace, pod name) -> the IP the pod has, or None.
PodIpResolver = Callable[[str, str], str | None]
# (namespace, Service name, port) -> the (IP, port) of a ready pod behind it, or None.
ServiceResolver = Callable[[str, str, int], tuple[str, int] | None]

# What a process inherits from the sandbox: enough to find programs and the venv.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "TZ")
# The chart's image (Dockerfile): its ENTRYPOINT and WORKDIR, which a process here
# replaces with this checkout's venv and root.
GPUFLOW_IMAGE = "gpuflow"
IMAGE_ENTRYPOINT = "gpuflow"
IMAGE_WORKDIR = "/app"
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SVC_NAME = re.compile(r"([a-z0-9-]+)\.[a-z0-9-]+\.([a-z0-9-]+)\.svc(\.cluster\.local)?\.?")
# An http(s) URL whose host is a Service's name: <svc>.<ns>.svc[.cluster.local][:port]
_SVC_URL = re.compile(
    r"(https?)://([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?(?::(\d+))?(/.*)?"
)


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
        data = object_data(obj) if obj is not None else {}
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


def _env_from(pod: Obj, container: Obj, lookup: Lookup) -> dict[str, str]:
    """The variables of the container's `envFrom` sources, in order (a later source's
    key wins)."""
    ns = str((pod.get("metadata") or {}).get("namespace", "default"))
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for key, kind in (("configMapRef", "configmaps"), ("secretRef", "secrets")):
            if key not in source:
                continue
            ref = source[key]
            obj = lookup(kind, ns, str(ref.get("name", "")))
            if obj is None:
                if ref.get("optional"):
                    continue
                what = "secret" if kind == "secrets" else "configmap"
                raise EnvError(f'{what} "{ref.get("name")}" not found')
            for name, value in object_data(obj).items():
                env[prefix + name] = value
    return env


def rewrite_dns(value: str, namespace: str, resolve: PodIpResolver) -> str:
    """A pod's cluster DNS name (`<pod>.<svc>.<ns>.svc`) replaced by its IP; other
    values unchanged. There is no cluster DNS in the sandbox."""
    m = _SVC_NAME.fullmatch(value)
    if not m:
        return value
    ip = resolve(m.group(2) or namespace, m.group(1))
    return ip if ip is not None else value


def rewrite_service_url(value: str, resolve: ServiceResolver) -> str:
    """An http(s) URL to a Service (`http://<svc>.<ns>.svc:<port>/...`) pointed at a
    ready pod behind it, as cluster DNS and kube-proxy would route it, resolved once
    when the process starts; other values, and Services with no ready pod, unchanged."""
    m = _SVC_URL.fullmatch(value)
    if not m:
        return value
    scheme, service, namespace, port, path = m.groups()
    default_port = 443 if scheme == "https" else 80
    found = resolve(namespace, service, int(port) if port else default_port)
    if found is None:
        return value
    return f"{scheme}://{found[0]}:{found[1]}{path or ''}"


def process_env(
    pod: Obj,
    container: Obj,
    *,
    lookup: Lookup,
    pod_ip: str,
    host_ip: str | None = None,
    mounts: Mounts,
    resolve: PodIpResolver,
    service_env: Mapping[str, str] | None = None,
    resolve_service: ServiceResolver | None = None,
) -> dict[str, str]:
    """The environment of the process that plays `container` of `pod`; `host_ip` is
    the node's address (None: the pod's, as with hostNetwork); `service_env` the
    variables the kubelet adds (KUBERNETES_SERVICE_HOST and _PORT)."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace", "default"))
    env: dict[str, str] = {**(service_env or {}), **_env_from(pod, container, lookup)}
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
    if resolve_service is not None:
        env = {k: rewrite_service_url(v, resolve_service) for k, v in env.items()}
    base = {k: os.environ[k] for k in INHERITED if k in os.environ}
    base["HOSTNAME"] = str((pod.get("spec") or {}).get("hostname") or meta.get("name", ""))
    return {**base, **env}


def is_gpuflow_image(image: str) -> bool:
    """Whether `image` is the chart's (`[registry/]gpuflow[:tag][@digest]`)."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0] == GPUFLOW_IMAGE


def command_line(container: Obj, env: Mapping[str, str], workdir: Path) -> list[str]:
    """The container's command and args with `$(VAR)` expanded; a leading `python` or
    `python3` is the sandbox's own interpreter, a leading program the venv holds
    (`gpuflow`, `alembic`, `celery`) the venv's. For the chart's image the entrypoint
    `gpuflow` runs when there is no command, and an argument under its WORKDIR /app
    points into `workdir` (this checkout). An EnvError if there is no command and the
    image is another: its entrypoint is not known here."""
    image = str(container.get("image", ""))
    gpuflow_image = is_gpuflow_image(image)
    command = [str(c) for c in container.get("command") or []]
    if not command:
        if not gpuflow_image:
            raise EnvError(
                f"no command: the sandbox knows the entrypoint of image {GPUFLOW_IMAGE!r} "
                f"only, not of {image!r}"
            )
        command = [IMAGE_ENTRYPOINT]
    argv = [expand(a, env) for a in [*command, *(str(a) for a in container.get("args") or [])]]
    if gpuflow_image:
        argv = [_in_workdir(a, workdir) for a in argv]
    venv_bin = Path(sys.executable).parent
    if Path(argv[0]).name in ("python", "python3"):
        argv[0] = sys.executable
    elif "/" not in argv[0] and (venv_bin / argv[0]).is_file():
        argv[0] = str(venv_bin / argv[0])
    return argv


def _in_workdir(arg: str, workdir: Path) -> str:
    """`arg` with a leading IMAGE_WORKDIR replaced by `workdir` (/app/alembic.ini ->
    <checkout>/alembic.ini); other arguments unchanged."""
    if arg == IMAGE_WORKDIR:
        return str(workdir)
    if arg.startswith(IMAGE_WORKDIR + "/"):
        return str(workdir / arg[len(IMAGE_WORKDIR) + 1 :])
    return arg
