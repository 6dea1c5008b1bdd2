"""What the API client commands (`gpuflow submit`, `jobs`, `cancel`) print.

Called by gpuflow.serve_cmd with what api.client returned or raised: `jobs_table`
lays jobs out in columns (id, status, GPUs, progress, name, and the reason a job
waits or ended), `error_lines` turns a refusal into one `field: message` line per
error of FastAPI's 422 `detail` list (its `loc` joined as `clusters[0].name`), or one
line for any other status or detail.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# The first element of a FastAPI error's `loc` says where the value came from; the
# user named an option, not a part of the request, so it is left out.
_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})
# A message longer than this is cut: the server may echo a long value back.
_MAX_MESSAGE_CHARS = 300

_COLUMNS = ("ID", "STATUS", "GPUS", "PROGRESS", "NAME", "REASON")


def field_path(loc: Sequence[object]) -> str:
    """`("body", "clusters", 0, "name")` as `clusters[0].name`."""
    parts = list(loc)
    if len(parts) > 1 and parts[0] in _LOCATIONS:
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "request"


def _one_line(text: object) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_MESSAGE_CHARS else line[:_MAX_MESSAGE_CHARS] + "..."


def error_lines(status: int | None, detail: object) -> list[str]:
    """The lines (without a prefix) that tell the user what the server refused."""
    if status is None:
        return [f"cannot reach the server: {_one_line(detail)}"]
    if isinstance(detail, list) and detail:
        lines = []
        for item in detail:
            if isinstance(item, dict) and isinstance(item.get("loc"), list | tuple):
                lines.append(f"{field_path(item['loc'])}: {_one_line(item.get('msg', ''))}")
            else:
                lines.append(f"HTTP {status}: {_one_line(json.dumps(item))}")
        return lines
    if isinstance(detail, dict):
        field = detail.get("field")
        message = detail.get("msg", detail.get("message"))
        if message is not None:
            where = f"{field}: " if field else ""
            return [f"{where}{_one_line(message)}"]
        return [f"HTTP {status}: {_one_line(json.dumps(detail))}"]
    return [f"HTTP {status}: {_one_line(detail)}"]


def _reason(job: dict[str, Any]) -> str:
    return _one_line(job.get("reason_message") or job.get("reason_code") or "")


def jobs_table(jobs: Sequence[dict[str, Any]]) -> str:
    """The jobs in aligned columns under a header; the reason column comes last and
    is not padded, so that a long reason does not widen the others."""
    rows = [
        (
            str(job["id"]),
            str(job["status"]),
            str(job["num_gpus"]),
            f"{job['progress']:.2f}",
            str(job["name"]),
            _reason(job),
        )
        for job in jobs
    ]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(_COLUMNS)]
    lines = []
    for row in [_COLUMNS, *rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines) + "\n"
