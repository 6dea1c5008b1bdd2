"""Node schedules for replays: CSV `time_s,node,event`, with event down|up (a failure
and the recovery) or cordon|drain|uncordon (maintenance, controller.maintenance).

Read by the CLI (`gpuflow replay --failures FILE`) into `NodeEvent`s and
`MaintenanceEvent`s for the simulator.
"""

from __future__ import annotations

import csv
from pathlib import Path

from controller.maintenance import MaintenanceEvent, NodeAction
from controller.model import Cluster
from controller.sim import NodeEvent

EVENTS = ("down", "up", *(a.value for a in NodeAction))


class FailureScheduleError(ValueError):
    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        super().__init__(f"{path}:{line}: field '{field}': {message}")


def load_failures(path: str | Path, cluster: Cluster) -> tuple[NodeEvent | MaintenanceEvent, ...]:
    src = str(path)
    events: list[NodeEvent | MaintenanceEvent] = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"time_s", "node", "event"} - set(reader.fieldnames or ())
        if missing:
            raise FailureScheduleError(src, 1, sorted(missing)[0], "missing column")
        for row in reader:
            line = reader.line_num
            try:
                t = float(row["time_s"])
            except (TypeError, ValueError):
                raise FailureScheduleError(src, line, "time_s", "not a number") from None
            if not t >= 0:
                raise FailureScheduleError(src, line, "time_s", "must be >= 0")
            node = (row["node"] or "").strip()
            try:
                cluster.node_index(node)
            except KeyError:
                raise FailureScheduleError(src, line, "node", f"no node {node!r}") from None
            event = (row["event"] or "").strip().lower()
            if event not in EVENTS:
                known = ", ".join(f"'{e}'" for e in EVENTS)
                raise FailureScheduleError(src, line, "event", f"must be one of {known}")
            if event in ("down", "up"):
                events.append(NodeEvent(t, node, event == "up"))
            else:
                events.append(MaintenanceEvent(t, node, NodeAction(event)))
    return tuple(sorted(events, key=lambda e: (e.time_s, e.node)))
