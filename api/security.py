"""Bearer tokens: high-entropy secrets stored as sha256, compared in constant time.

A sha256 of a 256-bit random secret needs no salt or slow hash: nothing about it
can be guessed offline. Used by api.deps (user tokens), the jobs router (per-job
metrics tokens) and `gpuflow admin create`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.models import Token, User

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
