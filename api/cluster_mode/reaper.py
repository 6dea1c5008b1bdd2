"""Cluster mode: deleting the DLJobs of cancelled jobs until Kubernetes has them gone.

A cancel is committed first (the job's row Cancelled with its event, in
api.cluster_mode.backend.ClusterModeBackend.cancel) and its DLJob deleted afterwards, so the answer
to a cancel never depends on Kubernetes and a cancel answered is never undone. What may
then be left is a DLJob whose row is Cancelled: the delete failed (the Kubernetes API
refused or was unreachable), or the service stopped between the commit and the
delete, or the DLJob was created after its job was cancelled. `Reaper` is the one
place that deletes them:

- `delete_now`, by the cancel right after its commit, in the request's thread;
- `request`, by the follower (api.cluster_mode.follower.Follower) for each DLJob version it sees
  whose row is Cancelled and which is not being deleted already: the list as the
  service starts finds those left by a crash, and any later version (the operator
  writing the DLJob's status) those left since;
- a delete that fails is tried again in the reaper's thread, one second later, then
  twice as long each time up to RETRY_MAX_S, until it succeeds or the service stops
  (the next start's list finds the DLJob again).

Done means Kubernetes has the DLJob gone or marked for deletion (its finalizer lets
the operator stop the pods first), or the name now belongs to another DLJob (a uid
other than the row's, or than the one read just before the delete, which the delete
names as its precondition): that one is not ours to delete.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from api.store.models import Job
from operators.kube import API_ERRORS, ApiException, KubeApi, Obj, error_message

log = logging.getLogger(__name__)

RETRY_FIRST_S = 1.0  # the first retry of a failed delete
# The longest wait between two tries: short enough that a DLJob outlives an outage of
# the Kubernetes API by seconds, long enough that an outage is not flooded.
RETRY_MAX_S = 10.0


@dataclass(frozen=True)
class DLJobRef:
    """A cancelled job's DLJob: where it is and, if the row learnt it, its uid."""

    namespace: str
    name: str
    uid: str | None

    @classmethod
    def of_job(cls, job: Job) -> DLJobRef | None:
        if job.dljob_namespace is None or job.dljob_name is None:
            return None
        return cls(job.dljob_namespace, job.dljob_name, job.dljob_uid)

    @classmethod
    def of_obj(cls, obj: Obj) -> DLJobRef:
        meta = obj["metadata"]
        return cls(str(meta.get("namespace") or ""), str(meta["name"]), str(meta["uid"]))


@dataclass
class _Retry:
    due_s: float  # time.monotonic() of the next try
    delay_s: float  # the wait after that try, if it fails too


class Reaper:
    """Deletes cancelled jobs' DLJobs, retrying until done (see the module doc)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._retries: dict[DLJobRef, _Retry] = {}
        self._wake = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.done = 0  # DLJobs deleted, or found gone, going or another's

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuflow-reaper", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop retrying; a DLJob still there is found again by the next start's list."""
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def pending(self) -> int:
        """DLJobs waiting for a (re)try."""
        with self._wake:
            return len(self._retries)

    def delete_now(self, ref: DLJobRef) -> bool:
        """Try once in the caller's thread; on failure the reaper's thread retries.
        True if done."""
        if self._try(ref):
            return True
        self._schedule([ref], RETRY_FIRST_S)
        return False

    def request(self, refs: Iterable[DLJobRef]) -> None:
        """Delete these in the reaper's thread, at once (the follower's writer calls
        this after its commit: no Kubernetes call is made inside a transaction)."""
        self._schedule(refs, 0.0)

    def _schedule(self, refs: Iterable[DLJobRef], after_s: float) -> None:
        now = time.monotonic()
        with self._wake:
            for ref in refs:
                if ref not in self._retries:
                    self._retries[ref] = _Retry(now + after_s, max(after_s, RETRY_FIRST_S))
            self._wake.notify_all()

    def _run(self) -> None:
        while True:
            with self._wake:
                due = self._due()
                while not self._stop and not due:
                    self._wake.wait(timeout=self._sleep_s())
                    due = self._due()
                if self._stop:
                    return
            for ref in due:
                done = self._try(ref)
                with self._wake:
                    retry = self._retries[ref]
                    if done:
                        del self._retries[ref]
                    else:
                        retry.due_s = time.monotonic() + retry.delay_s
                        retry.delay_s = min(2 * retry.delay_s, RETRY_MAX_S)

    def _due(self) -> list[DLJobRef]:
        now = time.monotonic()
        return [ref for ref, r in self._retries.items() if r.due_s <= now]

    def _sleep_s(self) -> float | None:
        if not self._retries:
            return None
        return max(0.0, min(r.due_s for r in self._retries.values()) - time.monotonic())

    def _try(self, ref: DLJobRef) -> bool:
        """Delete the DLJob unless it is gone, going, or another's; False if Kubernetes
        could not be asked or refused."""
        try:
            try:
                obj = self.api.get_dljob(ref.namespace, ref.name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                obj = None
            if (
                obj is not None
                and ref.uid in (None, obj["metadata"]["uid"])
                and not obj["metadata"].get("deletionTimestamp")
            ):
                # The uid read, as a precondition: a DLJob of the same name created
                # since the read is another's and stays.
                self.api.delete_dljob(ref.namespace, ref.name, uid=obj["metadata"]["uid"])
        except API_ERRORS as exc:
            log.warning(
                "DLJob %s/%s of a cancelled job: %s", ref.namespace, ref.name, error_message(exc)
            )
            return False
        self.done += 1
        return True
