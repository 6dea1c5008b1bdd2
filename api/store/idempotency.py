"""Idempotency keys of submissions (an `Idempotency-Key` header on POST /jobs,
/replays and /replays/sweeps).

Jobs: api.routes.jobs.submit_job builds the key's claim (`job_claim`: the job's id and
its first answer) and the backend stores it in the transaction that stores the job
(`claim_batch`, called by api.store.group_commit for a whole batch of submissions, and by
cluster mode for one), so the key and its job are committed together or not at all. A
request whose key was taken looks up the first answer (`first_answer`): a retry of
the same request (a client that timed out, a lost answer) gets it back, and no key
ever stands for two jobs. A claim stored without its job (by a version that claimed
keys in a transaction of their own) is completed by the retry under the claimed id.

Replays and sweeps: api.routes.replays looks the key up first (`answered`), then
stores the claim (`hold`) in the transaction that stores the replay rows, so the key
and the replays are committed together or not at all; a broker that refuses the
replays takes the claim with them (`release`), and a retry starts afresh.

Claims are per user, across routes (a key is remembered with its route, `scope`),
and kept for WINDOW; the same key with another body or on another route is refused
(the caller answers 422 naming the header, `reused_error`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi import Header
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from sqlalchemy import Connection, delete, select, tuple_
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from api.field_errors import invalid
from api.store.models import IDEMPOTENCY_KEY_LEN, IdempotencyKey, Job, User, utcnow

# How long a key is remembered: a day, as Stripe's API keeps its idempotency keys;
# longer than any client retries one request.
WINDOW = timedelta(hours=24)
# What a key was used on: POST /api/v1/<scope>.
JOBS, REPLAYS, SWEEPS = "jobs", "replays", "replays/sweeps"
KEYS = IdempotencyKey.metadata.tables[IdempotencyKey.__tablename__]


def key_header(description: str) -> Any:
    """The `Idempotency-Key` header's parameter: printable ASCII, no spaces, 1-255."""
    return Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=IDEMPOTENCY_KEY_LEN,
        pattern=r"^[\x21-\x7e]+$",
        description=description,
    )


class KeyReused(ValueError):
    """The key was used for a request with another body, or on another route."""

    def __init__(self, key: str, scope: str) -> None:
        self.key = key
        self.scope = scope  # the route it was used on
        super().__init__(key)

    def message(self, scope: str) -> str:
        if scope != self.scope:
            return f"already used for POST /api/v1/{self.scope} (keys last 24 h)"
        return "already used for a request with another body (keys last 24 h)"


class KeyTaken(RuntimeError):
    """A submission's key was claimed already (by an earlier request, or one committed
    in the same batch): nothing of the submission was stored; its answer is the first
    request's (`first_answer`)."""


def reused_error(exc: KeyReused, scope: str) -> RequestValidationError:
    """The 422 of a key reused on `scope`, naming the header."""
    return invalid(("header", "Idempotency-Key"), exc.message(scope), exc.key)


@dataclass(frozen=True)
class Claim:
    """What a claimed key stands for: the job id and answer of its first request, and
    whether that job is stored (if not, the first request failed or is in flight)."""

    job_id: str
    response: dict[str, Any]
    stored: bool


def fingerprint(body_json: str) -> str:
    return hashlib.sha256(body_json.encode()).hexdigest()


def job_claim(
    user_id: int, key: str, body_fingerprint: str, response: dict[str, Any]
) -> dict[str, Any]:
    """The claim of `key` for a new job whose answer is `response` (its "id" the job's):
    IdempotencyKey column values, for `claim_batch`."""
    return {
        "user_id": user_id,
        "key": key,
        "scope": JOBS,
        "fingerprint": body_fingerprint,
        "job_id": response["id"],
        "response": response,
        "created_at": utcnow(),
    }


def claim_batch(conn: Connection, claims: Sequence[dict[str, Any]]) -> list[bool]:
    """Insert `claims` (from `job_claim`) in `conn`'s transaction; for each, True if
    claimed now, False if the key was claimed already (by an earlier request within
    WINDOW, or an earlier claim of `claims`), not inserted. One statement whatever the
    number of claims (INSERT ... ON CONFLICT DO NOTHING RETURNING, on PostgreSQL and
    SQLite alike); a key claimed by another transaction not yet committed waits for
    it (PostgreSQL) and is then taken. A claimed key older than WINDOW, found only
    where a claim was refused, is deleted and claimed anew. Other expired keys are
    left to `forget_expired_keys`."""
    if not claims:
        return []
    inserted = _insert_new(conn, claims)
    refused = {(c["user_id"], c["key"]) for c in claims} - inserted
    if refused:
        expired = conn.execute(
            delete(KEYS)
            .where(tuple_(KEYS.c.user_id, KEYS.c.key).in_(sorted(refused)))
            .where(KEYS.c.created_at < utcnow() - WINDOW)
            .returning(KEYS.c.user_id, KEYS.c.key)
        ).all()
        if expired:
            again = {(r.user_id, r.key) for r in expired}
            inserted |= _insert_new(conn, [c for c in claims if (c["user_id"], c["key"]) in again])
    claimed: list[bool] = []
    for c in claims:
        pair = (c["user_id"], c["key"])
        claimed.append(pair in inserted)
        inserted.discard(pair)  # a second claim of the same key in `claims` is taken
    return claimed


def _insert_new(conn: Connection, claims: Sequence[dict[str, Any]]) -> set[tuple[int, str]]:
    """Insert the claims whose key is free (the first of several with one key); the
    (user, key) pairs inserted."""
    upsert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    statement = (
        upsert(KEYS)
        .on_conflict_do_nothing(index_elements=[KEYS.c.user_id, KEYS.c.key])
        .returning(KEYS.c.user_id, KEYS.c.key)
    )
    rows = conn.execute(statement, list(claims)).all()
    return {(r.user_id, r.key) for r in rows}


def forget_expired_keys(conn: Connection) -> None:
    """Delete every key older than WINDOW (an index on created_at): api.store.group_commit's
    writer calls it now and then, so that the table holds a day of keys, not all."""
    conn.execute(delete(KEYS).where(KEYS.c.created_at < utcnow() - WINDOW))


def first_answer(
    sessions: sessionmaker[Session], user_id: int, key: str, body_fingerprint: str
) -> Claim | None:
    """The claim of `key` (a key of POST /jobs) as stored; None if there is none (it
    expired, or its request failed). Raises KeyReused."""
    with sessions() as session:
        found = _claimed(session, user_id, key)
        if found is None:
            return None
        _check(found, JOBS, body_fingerprint)
        assert found.job_id is not None  # a key of POST /jobs
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


def answered(
    session: Session, user_id: int, scope: str, key: str, body_fingerprint: str
) -> dict[str, Any] | None:
    """The first answer given under `key` on `scope`; None if the key is new (keys
    older than WINDOW are forgotten, in `session`). Raises KeyReused."""
    _forget_expired(session, user_id)
    found = _claimed(session, user_id, key)
    if found is None:
        return None
    _check(found, scope, body_fingerprint)
    return dict(found.response)


def hold(
    session: Session,
    user_id: int,
    scope: str,
    key: str,
    body_fingerprint: str,
    response: dict[str, Any],
) -> None:
    """Claim `key` in `session`, committed with the rows `response` answers for; of two
    requests with one key, the second commit fails (IntegrityError, unique user and key)."""
    session.add(
        IdempotencyKey(
            user_id=user_id, key=key, scope=scope, fingerprint=body_fingerprint, response=response
        )
    )


def release(session: Session, user_id: int, key: str) -> None:
    """Forget `key` in `session`: the request it was claimed for was not carried out."""
    session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.user_id == user_id, IdempotencyKey.key == key)
    )


def _check(found: IdempotencyKey, scope: str, body_fingerprint: str) -> None:
    if found.scope != scope or found.fingerprint != body_fingerprint:
        raise KeyReused(found.key, found.scope)


def _forget_expired(session: Session, user_id: int) -> None:
    session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.user_id == user_id, IdempotencyKey.created_at < utcnow() - WINDOW
        )
    )


class Once:
    """A replay or sweep submitted under an idempotency key (None: none given), for
    api.routes.replays: the first answer, if any, else the claim committed with the
    new rows."""

    def __init__(self, key: str | None, user: User, scope: str, body: BaseModel) -> None:
        self.key, self.user_id, self.scope = key, user.id, scope
        self.fingerprint = fingerprint(body.model_dump_json())

    def first(self, session: Session) -> dict[str, Any] | None:
        """The first answer under this key; 422 naming the header if it was another's."""
        if self.key is None:
            return None
        try:
            return answered(session, self.user_id, self.scope, self.key, self.fingerprint)
        except KeyReused as exc:
            session.rollback()
            raise reused_error(exc, self.scope) from None

    def commit(self, session: Session, answer: BaseModel) -> dict[str, Any] | None:
        """Commit the new rows with the key claimed for `answer`; if another request
        claimed the key meanwhile, nothing is stored and its answer is returned."""
        if self.key is None:
            session.commit()
            return None
        response = answer.model_dump(mode="json")
        hold(session, self.user_id, self.scope, self.key, self.fingerprint, response)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            first = self.first(session)
            if first is None:
                raise  # not the key: another constraint refused the rows
            return first  # the same key, claimed at the same moment
        return None

    def release(self, session: Session) -> None:
        """Forget the claim (in `session`): the rows it answered for were not queued."""
        if self.key is not None:
            release(session, self.user_id, self.key)
