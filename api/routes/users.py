"""Users and their bearer tokens. Admins manage users; anyone manages their own tokens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, status
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from api.deps import AdminUser, CurrentUser, SessionDep
from api.http.security import issue_token
from api.schemas.common import INT32_MAX, Limit, Skip
from api.schemas.users import (
    TokenCreate,
    TokenCreated,
    TokenPublic,
    TokensPublic,
    UserCreate,
    UserPublic,
    UsersPublic,
)
from api.store.models import Token, User

router = APIRouter(tags=["users"])


@router.post("/users", status_code=201, response_model=UserPublic, responses={409: {}})
def create_user(body: UserCreate, session: SessionDep, admin: AdminUser) -> UserPublic:
    user = User(name=body.name, tenant=body.tenant, role=body.role)
    session.add(user)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise HTTPException(status.HTTP_409_CONFLICT, f"user {body.name!r} exists") from None
    return UserPublic.model_validate(user)


@router.get("/users", response_model=UsersPublic)
def list_users(
    session: SessionDep,
    admin: AdminUser,
    skip: Annotated[Skip, Query()] = 0,
    limit: Annotated[Limit, Query()] = 100,
) -> UsersPublic:
    count = session.scalar(select(func.count()).select_from(User)) or 0
    rows = session.scalars(select(User).order_by(User.id).offset(skip).limit(limit))
    return UsersPublic(data=[UserPublic.model_validate(u) for u in rows], count=count)


@router.get("/users/me", response_model=UserPublic)
def read_me(user: CurrentUser) -> UserPublic:
    return UserPublic.model_validate(user)


@router.post(
    "/users/{user_id}/tokens", status_code=201, response_model=TokenCreated, responses={404: {}}
)
def create_token(
    user_id: int, body: TokenCreate, session: SessionDep, user: CurrentUser
) -> TokenCreated:
    """A new bearer token for yourself, or (admins) for anyone; the secret is shown once."""
    owner = session.get(User, user_id) if 0 < user_id <= INT32_MAX else None
    if owner is None or (user.role != "admin" and owner.id != user.id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"user {user_id} not found")
    token, secret = issue_token(session, owner, body.name)
    session.commit()
    return TokenCreated(**TokenPublic.model_validate(token).model_dump(), token=secret)


@router.get("/tokens", response_model=TokensPublic)
def list_tokens(session: SessionDep, user: CurrentUser) -> TokensPublic:
    """Your tokens (never their secrets)."""
    rows = session.scalars(select(Token).where(Token.user_id == user.id).order_by(Token.id))
    data = [TokenPublic.model_validate(t) for t in rows]
    return TokensPublic(data=data, count=len(data))


@router.delete("/tokens/{token_id}", status_code=204, responses={404: {}})
def revoke_token(token_id: int, request: Request, session: SessionDep, user: CurrentUser) -> None:
    """Delete a token; it stops working at once (the service's token cache forgets it)."""
    token = session.get(Token, token_id) if 0 < token_id <= INT32_MAX else None
    if token is None or (user.role != "admin" and token.user_id != user.id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"token {token_id} not found")
    digest = token.token_hash
    session.delete(token)
    session.commit()
    request.app.state.tokens.forget(digest)
