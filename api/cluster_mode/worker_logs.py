"""A job's worker logs in cluster mode: its DLJob's latest pods and the log of one,
through the Kubernetes API (operators/pods/logs.py).

Called by api.cluster_mode.backend.ClusterModeBackend.worker_logs for GET /api/v1/jobs/{id}/logs
(api/routes/job_logs.py). A job with no pod now (waiting, or between attempts) and a
log the API server or the kubelet behind it refuses (its container waits to start,
the kubelet cannot be reached) are answered with a note and no lines; a worker rank
past the attempt's last is UnknownWorker (404); an API server that does not answer
BackendUnavailable (503).
"""

from __future__ import annotations

from api.backends import BackendUnavailable, UnknownWorker
from api.schemas.job_logs import MAX_LOG_BYTES, JobLogsPublic
from api.store.models import Job
from operators.kube import API_ERRORS, KubeApi, error_message, status_code
from operators.pods.logs import read_log, refusal, worker_pods


def cluster_worker_logs(api: KubeApi, job: Job, worker: int, tail_lines: int) -> JobLogsPublic:
    if not job.dljob_name or not job.dljob_namespace:
        return JobLogsPublic(
            job_id=job.id, worker=worker, workers=0, lines=[], note="the job has no DLJob"
        )
    try:
        pods = worker_pods(api, job.dljob_namespace, job.dljob_name)
    except API_ERRORS as exc:
        raise BackendUnavailable(f"Kubernetes API: {error_message(exc)}") from None
    if not pods:
        waiting = f"no worker pod now: the job is {job.status}"
        return JobLogsPublic(job_id=job.id, worker=worker, workers=0, lines=[], note=waiting)
    if worker >= len(pods):
        raise UnknownWorker(f"worker {worker}: the job's latest attempt has {len(pods)}")
    pod = pods[worker]
    found = JobLogsPublic(
        job_id=job.id,
        worker=worker,
        workers=len(pods),
        pod=pod.name,
        node=pod.node or None,
        phase=pod.phase,
        lines=[],
    )
    try:
        text = read_log(api, pod, tail_lines, MAX_LOG_BYTES)
    except API_ERRORS as exc:
        # The API server answered but gave no log (a container waiting to start, a pod
        # deleted meanwhile, a kubelet it cannot reach, a role without pods/log): said
        # in the note, the rest of the answer stands. Not answering at all is a 503.
        if status_code(exc) is None:
            raise BackendUnavailable(f"Kubernetes API: {error_message(exc)}") from None
        return found.model_copy(update={"note": f"no log: {refusal(exc)}"})
    note: str | None = None if text else "the worker has written nothing yet"
    return found.model_copy(update={"lines": text.splitlines(), "note": note})
