"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection.

Several operator replicas may run; only the one holding the Lease schedules. A
candidate takes the Lease when it is free or when its record (holder, renewTime)
has not changed for `lease_duration_s` as measured on the candidate's own clock
(never comparing clocks across machines); the holder renews it every `retry_s`, and
steps down when it could not renew for `renew_deadline_s`. Every write carries the
Lease's resourceVersion, so two candidates never both win: the second gets 409.
The operator runs `run()` in a thread and asks `leading_term()` before every write;
`on_change` wakes its loop when this replica starts or stops leading.

A holder that could not renew in time (an API server frozen past the renew deadline,
a partition) steps down and stays a candidate, as a standby is: it takes the Lease
again once it is free or still its own, or waits on the new holder. Each acquisition
opens a new term (`term`, counted from 1): the operator acts only in the term its
state was built for, so that nothing decided before a loss is written after it.

On a clean stop the holder releases the Lease (`release()`), as client-go does with
ReleaseOnCancel: it writes the record with an empty holderIdentity and a 1 s
duration, so that a standby takes it at its next retry instead of waiting out the
lease duration.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from operators.kube import API_ERRORS, KubeApi, Obj, status_code
from operators.kube.times import micro_time
from operators.logs import emit, one_line

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str = "default"
    name: str = "gpuflow-operator"
    # client-go's defaults are 15 s / 10 s / 2 s; the operator keeps them in production.
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0


class LeaderElector:
    def __init__(
        self,
        api: KubeApi,
        identity: str,
        config: LeaseConfig = LeaseConfig(),
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        self.api = api
        self.identity = identity
        self.config = config
        self.clock = clock
        self.on_change = on_change  # called with leading() when it changes
        self._renewed_at: float | None = None  # our clock, last successful acquire/renew
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self.transitions = 0
        self.term = 0  # acquisitions so far: the current or last term's number
        self.losses = 0  # terms that ended without a release
        # Guards (_renewed_at, term) together: leading_term() never pairs a new
        # renewal with the old term's number.
        self._lock = threading.Lock()

    def leading(self) -> bool:
        return self.leading_term() is not None

    def leading_term(self) -> int | None:
        """The term this replica leads in now, or None when it does not lead."""
        with self._lock:
            at = self._renewed_at
            if at is not None and self.clock() - at < self.config.renew_deadline_s:
                return self.term
            return None

    def run(self, stop: threading.Event) -> None:
        """Try to acquire, then renew, until `stop`; after losing the lease, step down
        (on_change(False)) and go on as a candidate."""
        lease = f"{self.config.namespace}/{self.config.name}"
        announced: int | None = None  # the term on_change(True) was called for
        while not stop.is_set():
            try:
                self.try_acquire_or_renew()
            except API_ERRORS:
                pass  # KubeApi logged it; retry after retry_s
            except Exception as exc:  # the elector must outlive any error
                emit(log, logging.WARNING, "lease error", lease=lease, error=one_line(exc))
            term = self.leading_term()
            # Compared by term, not by leading before and after the request: a term
            # that lapsed while this thread waited (or hung) and was won back is a loss.
            if announced is not None and term != announced:
                self.losses += 1
                fields = {"lease": lease, "identity": self.identity, "term": announced}
                emit(log, logging.WARNING, "lost the lease", **fields)
                announced = None
                self.on_change(False)
            if term is not None and announced is None:
                fields = {"lease": lease, "identity": self.identity, "term": term}
                emit(log, logging.INFO, "leading", **fields, transitions=self.transitions)
                announced = term
                self.on_change(True)
            stop.wait(self.config.retry_s)

    def release(self) -> bool:
        """Give the Lease up if this replica holds it (the caller has stopped `run`
        and every write): holder emptied, duration 1 s, as client-go's release().
        True if released."""
        cfg = self.config
        if not self.leading():
            return False
        with self._lock:
            self._renewed_at = None  # no write from here on
        self.on_change(False)
        lease = self.api.get_lease(cfg.namespace, cfg.name)
        spec = (lease or {}).get("spec") or {}
        if lease is None or spec.get("holderIdentity") != self.identity:
            return False
        stamp = micro_time(time.time())
        released = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": spec.get("leaseTransitions") or 0,
        }
        try:
            self.api.replace_lease(cfg.namespace, {**lease, "spec": released})
        except API_ERRORS:
            return False  # KubeApi logged it; the lease expires instead
        emit(log, logging.INFO, "released the lease", lease=f"{cfg.namespace}/{cfg.name}")
        return True

    def try_acquire_or_renew(self) -> bool:
        cfg = self.config
        now = self.clock()
        lease = self.api.get_lease(cfg.namespace, cfg.name)
        if lease is None:
            return self._write(None, now)
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        # A record is dated when its answer arrived, not when it was asked for: after
        # a request that hung, the holder's renewals must be waited out in full.
        seen = self.clock()
        if record != self._observed:
            self._observed, self._observed_at = record, seen
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration_s)
        if holder and holder != self.identity and seen - self._observed_at < duration:
            return False  # held by another, still fresh
        return self._write(lease, now)

    def _write(self, lease: Obj | None, now: float) -> bool:
        cfg = self.config
        stamp = micro_time(time.time())
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(cfg.lease_duration_s)),
            "renewTime": stamp,
        }
        try:
            if lease is None:
                spec["acquireTime"] = stamp
                spec["leaseTransitions"] = 0
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                    "spec": spec,
                }
                self.api.create_lease(cfg.namespace, body)
            else:
                old = lease.get("spec") or {}
                if old.get("holderIdentity") == self.identity:
                    spec["acquireTime"] = old.get("acquireTime") or stamp
                    spec["leaseTransitions"] = old.get("leaseTransitions") or 0
                else:
                    spec["acquireTime"] = stamp
                    spec["leaseTransitions"] = int(old.get("leaseTransitions") or 0) + 1
                    self.transitions += 1
                self.api.replace_lease(cfg.namespace, {**lease, "spec": spec})
        except Exception as exc:
            if status_code(exc) == 409:
                return False  # another candidate wrote first
            raise
        with self._lock:
            at = self._renewed_at
            if at is None or now - at >= cfg.renew_deadline_s:
                self.term += 1  # not leading until now: a new term
            self._renewed_at = now
        return True
