"""Rows for DLJobs made without the service (kubectl apply): adopted at first sight.

The follower (api.cluster_mode.follower.Follower) calls `adopt` for a DLJob version whose
job row it cannot find: the row takes its tenant from spec.tenant and is owned by the
tenant's `kubectl@<tenant>` user (made here once, with no token); the job's metrics
token goes into a Secret its pods read (api.cluster_mode.metrics_secrets.adopt). The follower also
reads DLJob timestamps with `epoch_s`.
"""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.cluster_mode import metrics_secrets
from api.http.security import hash_token
from api.store.models import Job, JobEvent, User
from controller.model.events import EventKind
from controller.model.precision import DEFAULT_PRECISION
from operators.dljobs.resources import QUEUED, foreign_id
from operators.kube import API_ERRORS, KubeApi, Obj, error_message
from operators.kube.times import parse_time

log = logging.getLogger(__name__)

KUBECTL_USER = "kubectl@{tenant}"


def adopt(api: KubeApi, session: Session, obj: Obj) -> Job:
    """A row for a DLJob made without the service (kubectl): on first sight."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    tenant = str(spec.get("tenant") or "default")[:100]
    gpus = int(spec.get("gpus") or 1)
    created_s = epoch_s(meta.get("creationTimestamp"))
    created = datetime.fromtimestamp(created_s, UTC) if created_s else datetime.now(UTC)
    duration = spec.get("expectedDurationSeconds")
    row = Job(
        id=foreign_id(meta["uid"]),
        tenant=tenant,
        user_id=_kubectl_user(session, tenant),
        name=str(meta["name"])[:100],
        num_gpus=gpus,
        min_gpus=int(spec.get("minGpus") or gpus),
        max_gpus=int(spec.get("maxGpus") or gpus),
        model=str(spec.get("model") or "generic")[:100],
        duration_s=float(duration) if duration else None,
        iterations=None,
        batch_size=spec.get("batchSize"),
        gpu_mem_mib=spec.get("gpuMemMib"),
        precision=str(spec.get("precision") or DEFAULT_PRECISION),
        priority=int(spec.get("priority") or 0),
        metrics_token_hash=hash_token(_metrics_token(api, obj)),
        status=QUEUED,
        progress=0.0,
        attained_gpu_s=0.0,
        restarts=0,
        nodes="",
        submit_s=created_s,
        created_at=created,
        updated_at=datetime.now(UTC),
        dljob_namespace=meta.get("namespace"),
        dljob_name=meta["name"],
        dljob_uid=meta["uid"],
    )
    session.add(row)
    session.add(
        JobEvent(job_id=row.id, kind=EventKind.SUBMITTED, sim_s=created_s, detail="kubectl")
    )
    session.flush()
    return row


def _metrics_token(api: KubeApi, obj: Obj) -> str:
    """The adopted job's metrics token, in a Secret its pods read; if Kubernetes
    refuses the Secret, a token nobody holds (the job runs, reporting nothing)."""
    try:
        return metrics_secrets.adopt(api, obj)
    except API_ERRORS as exc:
        name = obj["metadata"]["name"]
        log.warning("no metrics Secret for DLJob %s: %s", name, error_message(exc))
        return secrets.token_urlsafe(32)


def _kubectl_user(session: Session, tenant: str) -> int:
    name = KUBECTL_USER.format(tenant=tenant)[:100]
    user_id = session.scalar(select(User.id).where(User.name == name))
    if user_id is not None:
        return int(user_id)
    try:
        with session.begin_nested():
            user = User(name=name, tenant=tenant, role="user")
            session.add(user)
        return user.id
    except IntegrityError:  # another replica made it meanwhile
        user_id = session.scalar(select(User.id).where(User.name == name))
        assert user_id is not None
        return int(user_id)


def epoch_s(text: str | None) -> float:
    """A Kubernetes timestamp in seconds since the epoch; 0.0 if absent or unparsable."""
    if not text:
        return 0.0
    try:
        return parse_time(text)
    except ValueError:
        return 0.0
