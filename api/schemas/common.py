"""Shared field types: names are short and printable, numbers bounded.

Bounds keep every value storable in a 32-bit integer column or a float, so no
input can reach the database and fail there (schemathesis checks this).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from policies.registry import policy_names

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, examples=["alice"])]
Skip = Annotated[int, Field(ge=0, le=1_000_000_000)]
Limit = Annotated[int, Field(ge=1, le=1000)]
INT32_MAX = 2**31 - 1


def _integral_float(value: Any) -> Any:
    """10.0 is the integer 10 to JSON Schema (and so to the OpenAPI document and its
    clients); 10.5 and `true` stay refused by the strict int that follows."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# On a strict int (Field(strict=True)): whole floats taken, `true` and 1.5 refused.
WHOLE = BeforeValidator(_integral_float)


def _known_policies(schema: dict[str, Any]) -> None:
    """The registry's names, read when the document is built (so a policy registered
    later is listed); the routes refuse any other name with a 422 naming the field."""
    schema["enum"] = policy_names()


PolicyName = Annotated[str, Field(max_length=32, json_schema_extra=_known_policies)]


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
