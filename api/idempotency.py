"""Idempotency keys of job submissions (POST /jobs with an `Idempotency-Key` header).

Called by api.routes.jobs.submit_job before the job is handed to the backend. The key
is claimed in a transaction of its own, with the job's id and its first answer, before
the job is stored: a retry of the same request (a client that timed out, a 503) finds
the claim and reuses that id, so the job's primary key allows one job at most however
many times the request is sent, and a retry after the job was stored gets the first
answer back. Claims are per user and kept for WINDOW; the same key with another body
is refused (the caller answers 422).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from api.models import IdempotencyKey, Job, utcnow

# How long a key is remembered: a day, as Stripe's API keeps its idempotency keys;
# longer than any client retries one request.
WINDOW = timedelta(hours=24)


class KeyReused(ValueError):
    """The key was used for a request with another body."""


@dataclass(frozen=True)
class Claim:
    """What a claimed key stands for: the job id and answer of its first request, and
    whether that job is stored (if not, the first request failed or is in flight)."""

    job_id: str
    response: dict[str, Any]
    stored: bool


def fingerprint(body_json: str) -> str:
    return hashlib.sha256(body_json.encode()).hexdigest()


def claim(
    sessions: sessionmaker[Session],
    user_id: int,
    key: str,
    body_fingerprint: str,
    response: dict[str, Any],
) -> Claim | None:
    """Claim `key` for a new job whose answer is `response` (its "id" the job's); None
    if claimed now, else the earlier claim. Raises KeyReused."""
    with sessions() as session:
        session.execute(
            delete(IdempotencyKey).where(
                IdempotencyKey.user_id == user_id, IdempotencyKey.created_at < utcnow() - WINDOW
            )
        )
        found = _claimed(session, user_id, key)
        if found is None:
            session.add(
                IdempotencyKey(
                    user_id=user_id,
                    key=key,
                    fingerprint=body_fingerprint,
                    job_id=response["id"],
                    response=response,
                )
            )
            try:
                session.commit()
                return None
            except IntegrityError:  # the same key, claimed at the same moment
                session.rollback()
                found = _claimed(session, user_id, key)
                assert found is not None
        if found.fingerprint != body_fingerprint:
            raise KeyReused(key)
        stored = session.get(Job, found.job_id) is not None
        return Claim(found.job_id, dict(found.response), stored)


def update_answer(sessions: sessionmaker[Session], user_id: int, key: str, response: Any) -> None:
    """The answer of a retry that stored the job the first request did not."""
    with sessions() as session:
        found = _claimed(session, user_id, key)
        if found is not None:
            found.response = response
            session.commit()


def _claimed(session: Session, user_id: int, key: str) -> IdempotencyKey | None:
    return session.scalar(
        select(IdempotencyKey).where(IdempotencyKey.user_id == user_id, IdempotencyKey.key == key)
    )
