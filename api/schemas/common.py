"""Shared field types: names are short and printable, numbers bounded.

Bounds keep every value storable in a 32-bit integer column or a float, so no
input can reach the database and fail there (schemathesis checks this).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, examples=["alice"])]
Skip = Annotated[int, Field(ge=0, le=1_000_000_000)]
Limit = Annotated[int, Field(ge=1, le=1000)]
INT32_MAX = 2**31 - 1


class Strict(BaseModel):
    """Base for request bodies: unknown fields, NaN and infinities are 422s."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Public(BaseModel):
    """Base for responses built from ORM rows."""

    model_config = ConfigDict(from_attributes=True)


class Message(BaseModel):
    detail: str


Responses = dict[int | str, dict[str, Any]]  # extra OpenAPI responses of a route


def example_config(example: dict[str, Any]) -> ConfigDict:
    """A request body's config (as Strict's) with an OpenAPI example."""
    return ConfigDict(
        extra="forbid", allow_inf_nan=False, json_schema_extra={"examples": [example]}
    )
