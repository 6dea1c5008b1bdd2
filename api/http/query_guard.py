"""Unknown query parameters are 422s naming them, as unknown body fields are.

A dependency of every API router (api.app includes them with it): FastAPI ignores a
query parameter that no route parameter names, so `?limt=5` or `?tenant=b` would be
answered as if absent, the client never told that its filter was not applied.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from api.field_errors import field_error, invalid_all

# id(route) -> (route, its query parameters' names); routes are not hashable.
_known: dict[int, tuple[APIRoute, frozenset[str]]] = {}


def refuse_unknown_query(request: Request) -> None:
    """Raise a 422 naming each query parameter the matched route does not take."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    entry = _known.get(id(route))
    if entry is None or entry[0] is not route:
        entry = _known[id(route)] = (route, frozenset(_query_names(route.dependant)))
    known = entry[1]
    unknown = [name for name in request.query_params if name not in known]
    if unknown:
        msg = f"unknown query parameter; this route takes: {sorted(known)}"
        raise invalid_all(
            field_error(("query", name), msg, request.query_params[name], "extra_forbidden")
            for name in dict.fromkeys(unknown)
        )


def _query_names(dependant: Dependant) -> list[str]:
    names = [param.alias for param in dependant.query_params]
    for sub in dependant.dependencies:
        names += _query_names(sub)
    return names
