"""Node schedules for replays: CSV `time_s,node,event`, with event down|up (a failure
and the recovery) or cordon|drain|uncordon (maintenance, controller.maintenance).

Read by the CLI (`gpuflow replay --failures FILE`) into `NodeEvent`s and
`MaintenanceEvent`s for the simulator. As strict as a cluster spec: UTF-8 text (a
byte-order mark is skipped), at most MAX_FILE_BYTES and MAX_ROWS rows, finite times;
every fault is one `FailureScheduleError` naming the file, line and field.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from controller.maintenance import MaintenanceEvent, NodeAction
from controller.model import Cluster
from controller.sim import NodeEvent

EVENTS = ("down", "up", *(a.value for a in NodeAction))
# A schedule's rows are a few per node and day; 100,000 nodes is the largest cluster
# (controller.spec.MAX_NODES), and a row is ~30 bytes, so 1,000,000 rows fit the size.
MAX_ROWS = 1_000_000
MAX_FILE_BYTES = 32 * 2**20


class FailureScheduleError(ValueError):
    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        super().__init__(f"{path}:{line}: field '{field}': {message}")


def load_failures(path: str | Path, cluster: Cluster) -> tuple[NodeEvent | MaintenanceEvent, ...]:
    src = str(path)
    text = _read_text(Path(path), src)
    events: list[NodeEvent | MaintenanceEvent] = []
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        columns = reader.fieldnames or ()
        missing = {"time_s", "node", "event"} - {c.strip() for c in columns}
        if missing:
            raise FailureScheduleError(src, 1, sorted(missing)[0], "missing column")
        reader.fieldnames = [c.strip() for c in columns]
        for row in reader:
            line = reader.line_num
            if len(events) == MAX_ROWS:
                raise FailureScheduleError(src, line, "file", f"more than {MAX_ROWS} rows")
            events.append(_event(row, src, line, cluster))
    except csv.Error as exc:
        raise FailureScheduleError(src, reader.line_num, "file", f"not CSV: {exc}") from None
    return tuple(sorted(events, key=lambda e: (e.time_s, e.node)))


def _read_text(path: Path, src: str) -> str:
    """The file's text, refused (line 1, field 'file') if not UTF-8 or too large."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise FailureScheduleError(src, 1, "file", f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise FailureScheduleError(src, 1, "file", f"larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FailureScheduleError(src, line, "file", f"not UTF-8 text: {exc.reason}") from None


def _event(
    row: dict[str, str | None], src: str, line: int, cluster: Cluster
) -> NodeEvent | MaintenanceEvent:
    try:
        t = float(row["time_s"] or "")
    except (TypeError, ValueError):
        raise FailureScheduleError(src, line, "time_s", "not a number") from None
    if not math.isfinite(t) or t < 0:
        raise FailureScheduleError(src, line, "time_s", "must be a finite number >= 0")
    node = (row["node"] or "").strip()
    try:
        cluster.node_index(node)
    except KeyError:
        raise FailureScheduleError(src, line, "node", f"no node {node[:100]!r}") from None
    event = (row["event"] or "").strip().lower()
    if event not in EVENTS:
        known = ", ".join(f"'{e}'" for e in EVENTS)
        raise FailureScheduleError(src, line, "event", f"must be one of {known}")
    if event in ("down", "up"):
        return NodeEvent(t, node, event == "up")
    return MaintenanceEvent(t, node, NodeAction(event))
