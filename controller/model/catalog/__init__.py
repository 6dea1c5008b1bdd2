"""The model catalogue: a model's name to the profile of a real training job.

Trace loaders and the simulator turn a job's model name into a `ModelProfile`
(controller.model.catalog.profile) with `resolve`; `controller.model.perf` turns a profile and
an allocation into an iteration time. The profiles, with their sources, are in
controller.model.catalog.entries. Six models (bert, cifar10, deepspeech2, imagenet,
ncf, yolov3) also have the measurements published with Pollux:
`controller.model.catalog.measured` (re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType

from controller.model.catalog.entries import ALIASES, GENERIC, PROFILES
from controller.model.catalog.measured import (
    MEASURED_APPS,
    MeasuredProfile,
    PolluxFit,
    StepSample,
    ValidationRow,
    fit_pollux,
    measured_profile,
)
from controller.model.catalog.profile import ModelProfile
from controller.model.job import JobSpec

CATALOG: Mapping[str, ModelProfile] = MappingProxyType({p.name: p for p in PROFILES})


def _normalise(name: str) -> str:
    without_notes = re.sub(r"\(.*?\)", "", name.lower())
    return re.sub(r"[^a-z0-9]", "", without_notes)


@cache
def resolve(name: str) -> ModelProfile:
    """The profile for a model name: case and punctuation ignored, notes in parentheses
    dropped, aliases followed, then the longest known name the name starts with; any
    other name (also the empty one) gets `GENERIC`. Never raises."""
    key = _normalise(name)
    target = key if key in CATALOG else ALIASES.get(key)
    if target is None:
        known = [k for k in (*CATALOG, *ALIASES) if len(k) >= 3 and key.startswith(k)]
        if known:
            best = max(known, key=len)
            target = best if best in CATALOG else ALIASES[best]
    if target is None or target == GENERIC.name:
        return GENERIC
    return CATALOG[target]


def gpu_util_of(spec: JobSpec) -> float:
    """How busy the job keeps a GPU alone (0..1]: its own figure where it has one
    (`JobSpec.gpu_util`: its trace's, or measured live), else its model's catalogue
    figure. The one reading of a job's utilisation: packing (Gandiva, the fragmentation
    placer) and the sharing model (controller.rates) all come through here."""
    return spec.gpu_util if spec.gpu_util is not None else resolve(spec.model).gpu_util


def names() -> tuple[str, ...]:
    """The catalogue's canonical model names, sorted."""
    return tuple(sorted(CATALOG))


__all__ = [
    "CATALOG",
    "GENERIC",
    "MEASURED_APPS",
    "MeasuredProfile",
    "ModelProfile",
    "PolluxFit",
    "StepSample",
    "ValidationRow",
    "fit_pollux",
    "measured_profile",
    "names",
    "resolve",
]
