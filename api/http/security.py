"""Bearer tokens: high-entropy secrets stored as sha256, compared in constant time.

A sha256 of a 256-bit random secret needs no salt or slow hash: nothing about it
can be guessed offline. Used by api.deps (user tokens), the jobs router (per-job
metrics tokens) and `gpuflow admin create`.

`TokenCache` keeps recent token -> user lookups for a few seconds (settings
token_cache_s), so a busy client does not cost a database round trip per request.
Revoking a token through the API forgets it at once; the TTL bounds how long a
token deleted behind the service's back (straight in the database) still works.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.store.models import Job, Token, User

TOKEN_PREFIX = "gf_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def token_matches(token: str, token_hash: str) -> bool:
    return hmac.compare_digest(hash_token(token), token_hash)


def user_for_token(session: Session, token: str) -> User | None:
    digest = hash_token(token)
    row = session.execute(
        select(User, Token.token_hash)
        .join(Token, Token.user_id == User.id)
        .where(Token.token_hash == digest)
    ).first()
    if row is None or not hmac.compare_digest(row[1], digest):
        return None
    user: User = row[0]
    return user


class TokenCache:
    """token sha256 -> User (detached, read-only), for `ttl_s` seconds; thread-safe.

    Only found users are kept (a wrong token always asks the database). `forget`
    wins over a lookup that was under way when it ran: such a lookup is not cached.
    """

    def __init__(
        self, ttl_s: float, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, User]] = {}
        self._generation = 0

    def get(self, digest: str) -> User | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if self._clock() >= entry[0]:
                del self._entries[digest]
                return None
            return entry[1]

    def generation(self) -> int:
        """Read before a database lookup, hand to `put` after it."""
        return self._generation

    def put(self, digest: str, user: User, generation: int) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            if generation != self._generation:
                return  # something was revoked meanwhile: the lookup may be stale
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[digest] = (self._clock() + self.ttl_s, user)

    def forget(self, digest: str | None = None) -> None:
        """Drop one token (None: all); lookups under way are not cached."""
        with self._lock:
            self._generation += 1
            if digest is None:
                self._entries.clear()
            else:
                self._entries.pop(digest, None)


async def authenticate(state: Any, token: str) -> User | None:
    """The user of `token` through the app's TokenCache (`state.tokens`), else the
    database in the threadpool (`state.sessions`); None for an unknown token. Called by
    api.http.guard before a request's body is read and by api.deps.current_user."""
    cache: TokenCache = state.tokens
    digest = hash_token(token)
    user = cache.get(digest)
    if user is None:
        generation = cache.generation()
        user = await run_in_threadpool(_lookup, state.sessions, token)
        if user is not None:
            cache.put(digest, user, generation)
    return user


def _lookup(sessions: sessionmaker[Session], token: str) -> User | None:
    with sessions() as session:
        return user_for_token(session, token)  # detached once the session closes


JOB_ID = re.compile(r"[0-9a-f]{32}")  # api.routes.jobs makes ids as uuid4().hex


def job_token_valid(sessions: sessionmaker[Session], job_id: str, token: str) -> bool:
    """A job's metrics token (X-Job-Token) for job `job_id`: checked by api.http.guard before
    a report's body is read, and by its route."""
    if not JOB_ID.fullmatch(job_id):
        return False
    with sessions() as session:
        digest = session.scalar(select(Job.metrics_token_hash).where(Job.id == job_id))
    return digest is not None and token_matches(token, digest)


def issue_token(session: Session, user: User, name: str) -> tuple[Token, str]:
    """Add a token for `user` (caller commits); returns the row and the secret."""
    secret = new_token()
    token = Token(user_id=user.id, name=name, token_hash=hash_token(secret))
    session.add(token)
    session.flush()
    return token, secret


def create_admin(session: Session, name: str, tenant: str) -> str:
    """The bootstrap admin (`gpuflow admin create`): returns its token, shown once."""
    user = User(name=name, tenant=tenant, role="admin")
    session.add(user)
    session.flush()
    _, secret = issue_token(session, user, "bootstrap")
    session.commit()
    return secret
