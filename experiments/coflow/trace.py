"""Reads the public Facebook coflow benchmark format into coflows and flows.

Format (coflow-benchmark's README, coflowsim's CoflowBenchmarkTraceProducer): the
first line is `<ports> <coflows>`; then one line per coflow
`<id> <arrival-ms> <#mappers> <mapper-port ...> <#reducers> <port:MB ...>`.

Flows follow coflowsim (Job.arrangeTasks, ReduceTask.roundToNearestNMB/createFlows):
mappers and reducers on the same port are merged; a reducer's MB (MiB in coflowsim:
it multiplies by 1048576) is rounded up to a whole MiB, then up to a multiple of the
number of mappers, and split evenly: one flow per mapper-reducer pair of at least
1 MiB. A coflow with no mapper or no reducer has no flow and is skipped, as
coflowsim's `ignoreThisJob` skips jobs without mappers. Called by
`experiments.coflow.replay` and the `gpuflow coflow` command.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

# coflowsim's MB is 2^20 bytes; gpuflow's network package counts MB of 10^6 bytes.
MB_PER_MIB = 1.048576


class CoflowTraceError(ValueError):
    """A malformed line: the message names file, line and field."""

    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        super().__init__(f"{path}:{line}: field '{field}': {message}")
        self.path = path
        self.line = line
        self.field = field


@dataclass(frozen=True)
class TraceCoflow:
    """One coflow line. `flow_mib[i][j]` is the flow from `mappers[i]` to `reducers[j]`:
    equal for every mapper, so it is stored once per reducer."""

    coflow_id: int
    arrival_ms: int
    mappers: tuple[int, ...]
    reducers: tuple[int, ...]
    reducer_flow_mib: tuple[int, ...]
    line: int

    @property
    def n_flows(self) -> int:
        return len(self.mappers) * len(self.reducers)

    @property
    def longest_flow_mib(self) -> int:
        return max(self.reducer_flow_mib, default=0)


@dataclass(frozen=True)
class CoflowTrace:
    path: str
    ports: int
    coflows: tuple[TraceCoflow, ...]

    @property
    def n_flows(self) -> int:
        return sum(c.n_flows for c in self.coflows)


def read_trace(path: str | Path) -> CoflowTrace:
    """Parse a benchmark trace; raise `CoflowTraceError` on the first bad field."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CoflowTraceError(name, 0, "file", exc.strerror or str(exc)) from None
    except UnicodeDecodeError:
        raise CoflowTraceError(name, 0, "file", "not UTF-8 text") from None
    lines = text.splitlines()
    if not lines:
        raise CoflowTraceError(name, 1, "ports", "empty file, expected '<ports> <coflows>'")
    head = lines[0].split()
    if len(head) != 2:
        raise CoflowTraceError(name, 1, "header", f"expected '<ports> <coflows>', got {lines[0]!r}")
    ports = _int(head[0], name, 1, "ports", minimum=1)
    count = _int(head[1], name, 1, "coflows", minimum=0)
    body = [(i + 2, raw) for i, raw in enumerate(lines[1:]) if raw.strip()]
    if len(body) != count:
        where = body[-1][0] if body else 1
        raise CoflowTraceError(
            name, where, "coflows", f"header announces {count} coflows, file has {len(body)}"
        )
    coflows: list[TraceCoflow] = []
    seen: set[int] = set()
    for number, raw in body:
        coflow = _coflow(raw.split(), ports, name, number)
        if coflow.coflow_id in seen:
            raise CoflowTraceError(name, number, "id", f"coflow {coflow.coflow_id} repeated")
        seen.add(coflow.coflow_id)
        if coflow.mappers and coflow.reducers:
            coflows.append(coflow)
    return CoflowTrace(name, ports, tuple(coflows))


def _coflow(tokens: list[str], ports: int, name: str, line: int) -> TraceCoflow:
    def take(field: str) -> str:
        if not tokens:
            raise CoflowTraceError(name, line, field, "missing")
        return tokens.pop(0)

    cid = _int(take("id"), name, line, "id", minimum=0)
    arrival = _int(take("arrival-ms"), name, line, "arrival-ms", minimum=0)
    n_map = _int(take("#mappers"), name, line, "#mappers", minimum=0)
    mappers = {_int(take("mapper"), name, line, "mapper", 0, ports - 1) for _ in range(n_map)}
    n_red = _int(take("#reducers"), name, line, "#reducers", minimum=0)
    reducer_mib: dict[int, float] = {}
    for _ in range(n_red):
        item = take("reducer")
        port_s, sep, mb_s = item.partition(":")
        if not sep:
            raise CoflowTraceError(name, line, "reducer", f"expected '<port>:<MB>', got {item!r}")
        port = _int(port_s, name, line, "reducer", 0, ports - 1)
        try:
            mb = float(mb_s)
        except ValueError:
            raise CoflowTraceError(name, line, "reducer", f"MB {mb_s!r} is not a number") from None
        if not math.isfinite(mb) or mb < 0:
            raise CoflowTraceError(name, line, "reducer", f"MB {mb_s!r} must be >= 0")
        # Reducers on one port merge (coalesceReducers), each first rounded up to 1 MiB.
        reducer_mib[port] = reducer_mib.get(port, 0) + math.ceil(mb)
    if tokens:
        raise CoflowTraceError(name, line, "reducer", f"unexpected extra field {tokens[0]!r}")
    reducers = tuple(sorted(reducer_mib))
    m = max(len(mappers), 1)
    flow_mib = tuple(max(math.ceil(reducer_mib[r] / m), 1) for r in reducers)
    return TraceCoflow(cid, arrival, tuple(sorted(mappers)), reducers, flow_mib, line)


def _int(
    text: str,
    name: str,
    line: int,
    field: str,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    try:
        value = int(text)
    except ValueError:
        raise CoflowTraceError(name, line, field, f"{text!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise CoflowTraceError(name, line, field, f"{value} is below {minimum}")
    if maximum is not None and value > maximum:
        raise CoflowTraceError(name, line, field, f"{value} is above {maximum}")
    return value
