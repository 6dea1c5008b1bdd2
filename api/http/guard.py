"""The request guard: a bearer token and a body-size limit, both before any body is read.

A pure ASGI middleware installed by `create_app` (inside the metrics middleware, so
its 401s and 413s are counted). FastAPI reads and parses a request's body before it
resolves the route's dependencies, so a token checked by a dependency comes after a
client without one has had its whole upload spooled; here the token is checked from
the headers alone, then the body is limited from `Content-Length` (413 before reading)
or, without one, by counting bytes as the app reads them (413 when the count passes
the limit, the rest never read).

Routes under the API prefix need a user's token, except a job's metrics report, which
carries its job's own token (`X-Job-Token`; a wrong one is the route's 404). The user found is
left in the request's state for `api.deps.current_user`, so it is not looked up twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.http.errors import DB_DOWN, DB_DOWN_DETAIL, RETRY_AFTER
from api.http.security import authenticate, job_token_valid

# POST /jobs/{id}/metrics: authenticated by the job's own token, not a user's.
JOB_REPORT = re.compile(r"/jobs/([^/]+)/metrics/?")
USER_KEY = "user"  # request.state.user: the authenticated User
UNAUTHORIZED_DETAIL = "missing or invalid bearer token"


class BodyTooLarge(HTTPException):
    """Raised from `receive` once a body without Content-Length passes its limit;
    an HTTPException, so FastAPI's body reader lets it through as the 413 it is."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


class RequestGuard:
    """401 without a valid bearer token and 413 over the size limit, from headers."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        prefix: str,
        max_body_bytes: int,
        larger: Mapping[str, int] | None = None,
    ) -> None:
        self.app = app
        self.prefix = prefix
        self.max_body_bytes = max_body_bytes
        self.larger = dict(larger or {})  # path prefix -> its own limit (trace uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        report = self._job_report(scope["method"], path)
        if report is not None or path.startswith(self.prefix + "/"):
            check = self._job_token(scope, report) if report else self._authenticate(scope)
            refusal = await check
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        limit = self._limit(path)
        declared = _content_length(scope)
        if declared == -1:
            await _refuse(400, "invalid Content-Length")(scope, receive, send)
            return
        if declared is not None and declared > limit:
            await _refuse(413, f"request body larger than {limit} bytes")(scope, receive, send)
            return
        await self._run_counted(scope, receive, send, limit)

    def _job_report(self, method: str, path: str) -> str | None:
        """The job id of a metrics report's path, else None."""
        if method != "POST" or not path.startswith(self.prefix + "/"):
            return None
        m = JOB_REPORT.fullmatch(path.removeprefix(self.prefix))
        return None if m is None else m[1]

    def _limit(self, path: str) -> int:
        for prefix, limit in self.larger.items():
            if path == prefix or path.startswith(prefix + "/"):
                return limit
        return self.max_body_bytes

    async def _authenticate(self, scope: Scope) -> JSONResponse | None:
        token = _bearer(scope)
        try:
            user = None if token is None else await authenticate(scope["app"].state, token)
        except DB_DOWN:
            return _refuse(503, DB_DOWN_DETAIL)
        if user is None:
            return JSONResponse(
                {"detail": UNAUTHORIZED_DETAIL},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        scope.setdefault("state", {})[USER_KEY] = user
        return None

    async def _job_token(self, scope: Scope, job_id: str) -> JSONResponse | None:
        """A report with no or a wrong X-Job-Token: the route's own 404, unread."""
        token = _header(scope, b"x-job-token")
        try:
            ok = token is not None and await run_in_threadpool(
                job_token_valid, scope["app"].state.sessions, job_id, token.decode("latin-1")
            )
        except DB_DOWN:
            return _refuse(503, DB_DOWN_DETAIL)
        return None if ok else _refuse(404, f"job {job_id!r} not found")

    async def _run_counted(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge as exc:
            if started:
                raise
            await _refuse(413, str(exc.detail))(scope, receive, send)


def _refuse(status: int, detail: str) -> JSONResponse:
    # The client may still be sending: close the connection rather than read the rest.
    headers = {"Connection": "close", **(RETRY_AFTER if status == 503 else {})}
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _header(scope: Scope, name: bytes) -> bytes | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    return next((v for k, v in headers if k.lower() == name), None)


def _bearer(scope: Scope) -> str | None:
    raw = _header(scope, b"authorization")
    if raw is None:
        return None
    scheme, _, token = raw.decode("latin-1").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _content_length(scope: Scope) -> int | None:
    """The declared length; None if absent, -1 if not a number."""
    raw = _header(scope, b"content-length")
    if raw is None:
        return None
    text = raw.decode("latin-1").strip()
    return int(text) if text.isdigit() and len(text) < 20 else -1
