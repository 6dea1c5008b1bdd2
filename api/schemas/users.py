"""User and token bodies. A token's secret appears once, in TokenCreated."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from api.schemas.common import Name, Public, Strict, example_config

Role = Literal["admin", "user"]


class UserCreate(Strict):
    model_config = example_config({"name": "alice", "tenant": "vision", "role": "user"})

    name: Name
    tenant: Name
    role: Role = "user"


class UserPublic(Public):
    id: int
    name: str
    tenant: str
    role: str
    created_at: datetime


class UsersPublic(Public):
    data: list[UserPublic]
    count: int


class TokenCreate(Strict):
    name: Name = Field(default="default", examples=["laptop"])


class TokenPublic(Public):
    id: int
    user_id: int
    name: str
    created_at: datetime


class TokensPublic(Public):
    data: list[TokenPublic]
    count: int


class TokenCreated(TokenPublic):
    token: str = Field(description="the bearer secret; shown only now")
