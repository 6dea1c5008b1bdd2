"""The operator's structured log lines: an event name and key=value fields (logfmt).

The writer (decisions), the API wrapper (errors), the informers (watch restarts, a
missing CRD), the leader elector and the loop log through `emit`, so that every line
reads `decision job=default/a action=start gpus=4 nodes=node-0 reason=Scheduled`;
`gpuflow operator run --log-format json` (gpuflow/operator_cmd.py) installs
`JsonFormatter`, which writes the same fields as one JSON object per line.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

# The attribute of a LogRecord that carries the fields (read by JsonFormatter).
FIELDS_ATTR = "gpuflow_fields"
EVENT_ATTR = "gpuflow_event"


def _value(v: object) -> str:
    text = "" if v is None else str(v)
    if text and not any(c in text for c in ' "=\n\t'):
        return text
    return json.dumps(text)  # quoted, with quotes and newlines escaped


def logfmt(fields: dict[str, Any]) -> str:
    """`key=value` pairs in the order given; values with spaces or quotes quoted."""
    return " ".join(f"{k}={_value(v)}" for k, v in fields.items())


def emit(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    """Log one line: `event key=value ...`, with the fields kept on the record."""
    if not logger.isEnabledFor(level):
        return
    extra = {FIELDS_ATTR: fields, EVENT_ATTR: event}
    logger.log(level, "%s %s", event, logfmt(fields), extra=extra)


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and first line, never a traceback."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, event and the record's fields
    (or its message, for lines not logged through `emit`)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
        }
        event = getattr(record, EVENT_ATTR, None)
        if event is not None:
            out["event"] = event
            out.update(getattr(record, FIELDS_ATTR, {}))
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)
