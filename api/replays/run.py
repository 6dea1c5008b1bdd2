"""Running one stored replay: load its trace and cluster, simulate, store the results.

Called by api.tasks.replay_task, in a Celery worker or (no broker) in-process.
Progress and a heartbeat go to the replays row as the simulation runs; results
(headline and summary) to its JSON columns; report files and plots under
data_dir/replays/<id>/. A replay runs once: only a queued one is started, in one
statement, so a task delivered twice (even to two workers at once) does not run it
twice. In-process, the service's shutdown stops it (`stop`), as failed with that
reason; one whose runner died is found by its stale heartbeat (api.replays.reconcile).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.store.models import Replay, TraceFile, utcnow
from controller.metrics import deadline_fields, headline, summarize
from controller.placement import make_placer
from controller.report import write_replay
from controller.sim import SimConfig, Simulator
from controller.spec import named_cluster
from controller.traces import load_trace
from policies.registry import make_policy

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 1.0  # wall seconds between progress writes: cheap, still live
SHUTDOWN_ERROR = "interrupted: the service shut down while it ran; submit it again"


class StopFlag(Protocol):
    """What ends a running replay: a threading.Event, or the API's replay processes'
    flag (api.replays.executor)."""

    def is_set(self) -> bool: ...


class ReplayStopped(Exception):
    """The service is shutting down: the replay ends here, as failed."""


def run_stored_replay(
    sessions: sessionmaker[Session],
    data_dir: Path,
    replay_id: int,
    stop: StopFlag | None = None,
) -> str:
    """Run replay `replay_id` if it is queued; returns its final status (or "missing").
    Setting `stop` ends it between two progress reports."""
    with sessions() as session:
        replay = session.get(Replay, replay_id)
        if replay is None:
            log.warning("replay %s no longer exists; skipped", replay_id)
            return "missing"
        started = session.execute(  # one statement: of two deliveries, one starts it
            update(Replay)
            .where(Replay.id == replay_id, Replay.status == "queued")
            .values(status="running", heartbeat_at=utcnow())
        )
        session.commit()
        session.refresh(replay)
        if started.rowcount != 1:  # type: ignore[attr-defined]
            log.warning("replay %s is %s, not queued; not run again", replay_id, replay.status)
            return replay.status
        trace = session.get(TraceFile, replay.trace_id)
        try:
            if trace is None:
                raise ValueError(f"trace {replay.trace_id} no longer exists")
            _simulate(sessions, data_dir, replay, trace, stop)
            replay.status = "succeeded"
            replay.progress = 1.0
        except ReplayStopped:
            log.warning("replay %s stopped by a shutdown", replay_id)
            replay.status = "failed"
            replay.error = SHUTDOWN_ERROR
        except Exception as exc:  # any failure is the replay's result, not the worker's
            log.exception("replay %s failed", replay_id)
            replay.status = "failed"
            replay.error = _shown_error(exc, trace)
        replay.finished_at = utcnow()
        session.commit()
        return replay.status


def _shown_error(exc: Exception, trace: TraceFile | None) -> str:
    """A failure as its owner sees it: a database error by kind only (its text carries
    SQL, parameters and hosts); the server's path to the trace as the trace's name."""
    if isinstance(exc, SQLAlchemyError):
        return "database error (logged on the server)"
    text = " ".join(str(exc).split())
    if trace is not None:
        text = text.replace(trace.path, f"trace {trace.id} ({trace.name})")
    return text[:2000]


def _simulate(
    sessions: sessionmaker[Session],
    data_dir: Path,
    replay: Replay,
    trace_row: TraceFile,
    stop: StopFlag | None,
) -> None:
    cluster = named_cluster(replay.cluster)  # a stored name, never a path (routes/replays)
    trace = load_trace(trace_row.path, trace_row.fmt)
    sim = Simulator(
        cluster,
        trace.jobs,
        make_policy(replay.policy),
        make_placer(replay.placement, cluster, replay.seed),
        SimConfig(
            round_interval_s=replay.interval_s, seed=replay.seed, max_time_s=replay.max_time_s
        ),
        trace_name=trace.name,
    )
    result = sim.run(_progress_writer(sessions, replay.id, stop))
    summary = summarize(result)
    out_dir = data_dir / "replays" / str(replay.id)
    paths = write_replay(out_dir, result, summary)
    # With deadlines in the trace, the three deadline figures of `replay --json` too.
    replay.headline = {**headline(summary, result.policy, result.wall_s), **deadline_fields(result)}
    replay.summary = summary.to_dict()  # never NaN or infinite (controller.metrics)
    replay.out_dir = str(out_dir.resolve())
    replay.plots = {p.stem: str(p.resolve()) for p in paths if p.suffix == ".png"}


def _progress_writer(
    sessions: sessionmaker[Session], replay_id: int, stop: StopFlag | None
) -> Callable[[int, int], None]:
    last = [0.0]

    def write(done: int, total: int) -> None:
        if stop is not None and stop.is_set():
            raise ReplayStopped
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY_S or total <= 0:
            return
        last[0] = now
        with sessions() as session:
            session.execute(
                update(Replay)
                .where(Replay.id == replay_id)
                .values(progress=min(1.0, done / total), heartbeat_at=utcnow())
            )
            session.commit()

    return write
