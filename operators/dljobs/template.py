"""A DLJob's worker pod template: the full `spec.template` or the one-container
shorthand (`spec.image`, `command`, `args`, `env`), its checks, and its requests.

`operators.dljobs.resources.job_spec` calls `check_template` (every check raises ValueError
starting with the field's path), `operators.pods.worker_pods` builds pods from
`pod_template`, and the backend asks `pod_requests` what one worker pod requests.
"""

from __future__ import annotations

import copy
from typing import Any

from operators.dljobs.requests import Requests, quantity, spec_requests

Obj = dict[str, Any]

# The container the operator gives GPUs and its env: the one named so, else the first
# (Kubeflow's PyTorchJob names its container "pytorch" the same way).
WORKER_CONTAINER = "worker"
SHORTHAND = ("image", "command", "args", "env")
# Pod fields only the operator sets (its placement); a template may not set them to
# anything else, since they would be silently overwritten.
OPERATOR_FIELDS = ("nodeName", "hostname", "subdomain")


def pod_template(spec: Obj) -> Obj:
    """A deep copy of the job's pod template (`metadata`, `spec`), the shorthand as a
    template with one container named "worker"."""
    if spec.get("template") is not None:
        template = copy.deepcopy(spec["template"])
        template.setdefault("metadata", {})
        template.setdefault("spec", {})
        return dict(template)
    container: Obj = {"name": WORKER_CONTAINER, "image": spec.get("image")}
    for field in ("command", "args", "env"):
        if spec.get(field):
            container[field] = copy.deepcopy(spec[field])
    return {"metadata": {}, "spec": {"containers": [container]}}


def worker_index(containers: list[Obj]) -> int:
    """The worker container's index: the one named "worker", else the first."""
    for i, c in enumerate(containers):
        if c.get("name") == WORKER_CONTAINER:
            return i
    return 0


def pod_requests(job: Obj) -> Requests:
    """CPU (millicores) and memory (MiB) one worker pod of the DLJob requests, init
    containers counted as the scheduler counts them."""
    return spec_requests(pod_template(job.get("spec") or {})["spec"])


def check_template(spec: Obj) -> None:
    """ValueError naming the field if the job's pod description cannot make pods."""
    has_template = spec.get("template") is not None
    if has_template and spec.get("image"):
        raise ValueError("spec.template: give exactly one of spec.template and spec.image")
    if not has_template:
        if not spec.get("image"):
            raise ValueError("spec.image: one of spec.image and spec.template is required")
        return
    for field in SHORTHAND[1:]:
        if spec.get(field):
            raise ValueError(
                f"spec.{field}: only with spec.image; set it on a container of spec.template"
            )
    template = spec["template"]
    if not isinstance(template, dict):
        raise ValueError("spec.template: must be an object (a PodTemplateSpec)")
    pod = template.get("spec")
    if not isinstance(pod, dict):
        raise ValueError("spec.template.spec: required (a PodSpec)")
    for field in OPERATOR_FIELDS:
        if pod.get(field):
            raise ValueError(f"spec.template.spec.{field}: set by the operator; leave it out")
    if pod.get("restartPolicy") not in (None, "Never"):
        raise ValueError(
            "spec.template.spec.restartPolicy: must be Never (the operator restarts the gang)"
        )
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ValueError("spec.template.spec.containers: at least one container is required")
    _check_containers("spec.template.spec.containers", containers)
    _check_containers("spec.template.spec.initContainers", pod.get("initContainers") or [])


def _check_containers(path: str, containers: list[Any]) -> None:
    seen: set[str] = set()
    for i, c in enumerate(containers):
        where = f"{path}[{i}]"
        if not isinstance(c, dict):
            raise ValueError(f"{where}: must be an object (a Container)")
        name = c.get("name")
        if not name:
            raise ValueError(f"{where}.name: required")
        if name in seen:
            raise ValueError(f"{where}.name: duplicate container name {name!r}")
        seen.add(str(name))
        if not c.get("image"):
            raise ValueError(f"{where}.image: required")
        resources = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for res, value in (resources.get(kind) or {}).items():
                try:
                    quantity(value)
                except ValueError as exc:
                    raise ValueError(f"{where}.resources.{kind}.{res}: {exc}") from None
