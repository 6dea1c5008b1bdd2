"""Traces: upload (validated, then kept under the data dir), validate only, list, get.

An invalid file is a 422 whose detail names the line and field (from TraceError).
A file is read in a child process (api.replays.trace_check), never in the API's: the
request's thread waits for its summary without holding the interpreter's lock.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, HTTPException, Query, Request, UploadFile, status
from sqlalchemy import func, select

from api.deps import CurrentUser, SessionDep, SettingsDep, can_see
from api.replays.trace_check import TraceChecker, TraceCheckFailed
from api.schemas.common import INT32_MAX, Limit, Responses, Skip
from api.schemas.replays import TraceCheck, TracePublic, TracesPublic
from api.store.models import TraceFile
from controller.traces import FORMATS, TraceError

router = APIRouter(prefix="/traces", tags=["traces"])
MAX_TRACE_BYTES = 64 * 2**20  # the largest public traces (Philly) are ~40 MiB of JSON
# A trace of more jobs is refused as it is read (~0.5 KiB held per job: a 10-million-row
# upload under the byte limit would otherwise hold ~5 GiB while being checked).
MAX_TRACE_JOBS = 1_000_000


def _known_formats(schema: dict[str, Any]) -> None:
    """The trace readers' names, declared; any other is a 422 naming the format."""
    schema["enum"] = sorted(FORMATS)


FormatForm = Annotated[
    str | None,
    Form(max_length=32, description="default: detect", json_schema_extra=_known_formats),
]
BAD_TRACE: Responses = {422: {"description": "not a readable trace: detail names line and field"}}


def _safe_name(filename: str | None) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(filename or "trace").name)[:80].lstrip(".")
    return stem or "trace"


def _check(request: Request, path: Path, fmt: str | None) -> TraceCheck:
    if fmt is not None and fmt not in FORMATS:
        raise HTTPException(422, {"msg": f"unknown format {fmt!r}", "known": sorted(FORMATS)})
    checker: TraceChecker = request.app.state.trace_checker
    try:
        return TraceCheck.model_validate(checker.check(path, fmt, MAX_TRACE_JOBS))
    except TraceCheckFailed as exc:
        # The file killed its reader (out of memory, most likely): the same file would
        # again, so it is refused as unreadable rather than a 503 to try later.
        failed = {"msg": str(exc), "line": None, "field": None, "error": str(exc)}
        raise HTTPException(422, failed) from None
    except TraceError as exc:
        # Named by the uploaded file's name, not the server's path to its copy.
        shown = TraceError(path.name, exc.line, exc.field, exc.message)
        detail = {"msg": exc.message, "line": exc.line, "field": exc.field, "error": str(shown)}
        raise HTTPException(422, detail) from None


def _save(upload: UploadFile, path: Path) -> None:
    size = 0
    with path.open("wb") as out:
        while chunk := upload.file.read(2**20):
            size += len(chunk)
            if size > MAX_TRACE_BYTES:
                raise HTTPException(413, f"trace larger than {MAX_TRACE_BYTES} bytes")
            out.write(chunk)


@router.post("/validate", response_model=TraceCheck, responses=BAD_TRACE)
def validate_trace(
    request: Request, file: UploadFile, user: CurrentUser, fmt: FormatForm = None
) -> TraceCheck:
    """Check a trace without keeping it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / _safe_name(file.filename)
        _save(file, path)
        return _check(request, path, fmt)


@router.post("", status_code=201, response_model=TracePublic, responses=BAD_TRACE)
def upload_trace(
    request: Request,
    file: UploadFile,
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    fmt: FormatForm = None,
) -> TracePublic:
    """Upload a trace for replays; it is validated first and kept only if valid."""
    folder = Path(tempfile.mkdtemp(prefix="upload-", dir=_traces_dir(settings.data_dir)))
    path = folder / _safe_name(file.filename)
    try:
        _save(file, path)
        info = _check(request, path, fmt)
        row = TraceFile(
            tenant=user.tenant,
            user_id=user.id,
            name=path.stem,
            fmt=info.fmt,
            path=str(path.resolve()),
            jobs=info.jobs,
            skipped=info.skipped,
            span_s=info.span_s,
        )
        session.add(row)
        session.commit()
    except BaseException:
        path.unlink(missing_ok=True)
        folder.rmdir()
        raise
    return TracePublic.model_validate(row)


def _traces_dir(data_dir: Path) -> Path:
    folder = data_dir / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@router.get("", response_model=TracesPublic)
def list_traces(
    session: SessionDep,
    user: CurrentUser,
    skip: Annotated[Skip, Query()] = 0,
    limit: Annotated[Limit, Query()] = 100,
) -> TracesPublic:
    query = select(TraceFile)
    if user.role != "admin":
        query = query.where(TraceFile.tenant == user.tenant)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(TraceFile.id.desc()).offset(skip).limit(limit))
    return TracesPublic(data=[TracePublic.model_validate(t) for t in rows], count=count)


@router.get("/{trace_id:int}", response_model=TracePublic, responses={404: {}})
def get_trace(trace_id: int, session: SessionDep, user: CurrentUser) -> TracePublic:
    row = session.get(TraceFile, trace_id) if 0 < trace_id <= INT32_MAX else None
    if row is None or not can_see(user, row.tenant):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"trace {trace_id} not found")
    return TracePublic.model_validate(row)
