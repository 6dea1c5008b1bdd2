"""The thread that samples the live cluster every period and keeps the samples bounded.

Started and stopped by api.app's lifespan with the backend, in both modes. Every
`settings.history_sample_s` of the backend's clock (local mode: the simulated clock,
as every time of local mode is; cluster mode: the wall clock) it describes the cluster
(`JobBackend.describe`: each GPU's shares and utilisation), reads each GPU's memory
and health (api.samples.readings) and the unfinished jobs' tenants and waits from the
job database, and writes one sample (api.samples.rows); every
`settings.history_coarse_s` it compacts (api.samples.compaction).

A sample is skipped while the newest one stored is younger than the period, so that a
restarted service, or a second replica of the API in cluster mode, does not sample
twice as often. A database or cluster error is logged and the next period tries again.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import func, insert, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.backends import BackendUnavailable, JobBackend
from api.samples.compaction import Compacted, compact
from api.samples.readings import ReadingSource, readings_for
from api.samples.rows import Sample, Waiting, build_sample
from api.settings import Settings
from api.store.models import TERMINAL_STATUSES, ClusterSample, Job, NodeSample, TenantSample
from operators.dljobs.resources import HOLDING_PHASES
from operators.kube import API_ERRORS

log = logging.getLogger(__name__)
# The thread wakes this often (wall seconds) at most, to notice a stop and the clock.
WAKE_S = 1.0


class Sampler:
    def __init__(
        self,
        backend: JobBackend,
        sessions: sessionmaker[Session],
        settings: Settings,
        readings: ReadingSource | None = None,
    ) -> None:
        self.backend = backend
        self.sessions = sessions
        self.sample_s = settings.history_sample_s
        self.full_s = settings.history_full_s
        self.coarse_s = settings.history_coarse_s
        self.retention_s = settings.history_retention_s
        self.readings = readings or readings_for(backend)
        scale = settings.time_scale if backend.mode == "local" else 1.0
        # Half a period of wall time: a sample is at most half a period late.
        self._wake_s = min(WAKE_S, self.sample_s / scale / 2)
        self._sampled_s: float | None = None  # the newest sample's time, as last known
        self._compacted_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuflow-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def tick(self) -> bool:
        """Take a sample if one is due, and compact if that is due; whether it sampled."""
        now_s = self.backend.now_s()
        sample = self._sampled_s is None or now_s - self._sampled_s >= self.sample_s
        tidy = self._compacted_at is None or now_s - self._compacted_at >= self.coarse_s
        if not (sample or tidy):
            return False
        due = False
        with self.sessions() as session:
            if sample:
                newest = session.scalar(select(func.max(ClusterSample.t_s)))
                due = newest is None or now_s - newest >= self.sample_s
                if due:
                    write(session, self.take(session, now_s))
                    session.commit()
                self._sampled_s = now_s if due else newest
            if tidy:
                self.compact(session, now_s)
        return due

    def take(self, session: Session, now_s: float) -> Sample:
        """One sample of the cluster now."""
        nodes = self.backend.describe().nodes
        rows = session.execute(
            select(Job.id, Job.tenant, Job.status, Job.submit_s, Job.gpu_mem_mib).where(
                Job.status.not_in(TERMINAL_STATUSES)
            )
        ).all()
        # An unfinished job that holds no GPUs waits (GET /queue's statuses: local
        # mode's Queued, Preempted, Suspended; cluster mode's phases but Admitted, Running).
        waiting = [
            Waiting(r.tenant, max(0.0, now_s - r.submit_s))
            for r in rows
            if r.status not in HOLDING_PHASES and r.submit_s is not None
        ]
        tenant_of = {r.id: r.tenant for r in rows}
        readings = self.readings(nodes, {r.id: r.gpu_mem_mib for r in rows})
        return build_sample(now_s, self.sample_s, nodes, readings, tenant_of, waiting)

    def compact(self, session: Session, now_s: float) -> Compacted:
        done = compact(session, now_s, self.full_s, self.coarse_s, self.retention_s)
        self._compacted_at = now_s
        return done

    def _run(self) -> None:
        while not self._stop.wait(self._wake_s):
            try:
                self.tick()
            except (SQLAlchemyError, BackendUnavailable, *API_ERRORS) as exc:
                log.warning("cluster history not sampled, retrying next period: %s", exc)
            except Exception:  # a bug must not end the history for the service's life
                log.exception("cluster history not sampled, retrying next period")


def write(session: Session, sample: Sample) -> None:
    """Insert one sample's rows (the caller commits)."""
    session.execute(insert(ClusterSample), [sample.cluster])
    for model, rows in ((NodeSample, sample.nodes), (TenantSample, sample.tenants)):
        if rows:
            session.execute(insert(model), rows)


def sampler_for(
    backend: JobBackend | None, sessions: sessionmaker[Session], settings: Settings
) -> Sampler | None:
    """The service's sampler: none without a backend or with history off."""
    if backend is None or not settings.history:
        return None
    return Sampler(backend, sessions, settings)
