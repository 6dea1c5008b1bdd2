"""What if over REST: the backend's live state, forecast under each policy.

Called by api/routes/whatif.py (in a threadpool thread: the simulations are CPU work).
`observe` reads the state the simulations start from — local mode's LiveCluster
(`LiveCluster.live_state`) or, in cluster mode, the DLJobs and Nodes the API follows
(api/whatif/cluster.py) — and `public` turns controller.whatif's forecasts into the
response, the caller's tenant's jobs named, the others only counted.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace

from api.backends import JobBackend, LocalBackend
from api.schemas.whatif import PolicyForecast, WhatIfJob, WhatIfPublic
from api.settings import Settings
from api.store.models import User
from api.whatif.observed import Observed
from controller.whatif import Forecast

# What every what-if approximates (controller/whatif.py's module docstring has more).
APPROXIMATIONS = (
    "each policy starts from a fresh state, as after a policy switch: Optimus' fits,"
    " Pollux's gradient statistics and Tiresias' and Gandiva's memory are re-learned"
    " in the replay",
    "the remaining work runs at the performance model's rate, not at a job's measured one",
    "running jobs keep their GPUs with no restart overhead; no arrivals and no node"
    " changes after now (cordons stay, drains preempt at once)",
)


class Gate:
    """One what-if at a time per service: each may take its whole wall budget."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> bool:
        return self._lock.acquire(blocking=False)

    def __exit__(self, *exc: object) -> None:
        if self._lock.locked():
            self._lock.release()


def observe(backend: JobBackend, settings: Settings, active_policy: str | None) -> Observed:
    """The backend's state now. `active_policy`: the policy the cluster runs, when the
    caller knows it better than the backend (cluster mode's ConfigMap)."""
    if backend.mode == "cluster":
        from api.whatif.cluster import observe_cluster  # the kubernetes client when needed

        return observe_cluster(backend, settings, active_policy)
    assert isinstance(backend, LocalBackend)
    live = backend.local.live
    state = replace(live.live_state(), placement=settings.placement)
    return Observed(
        state=state,
        active_policy=live.policy_name,
        cluster=live.cluster.name,
        statuses={j.spec.job_id: j.status.value for j in state.jobs},
    )


def public(
    observed: Observed,
    forecasts: Mapping[str, Forecast],
    user: User,
    names: Mapping[str, str],
) -> WhatIfPublic:
    """The response: every forecast's figures, the jobs `user` may see (their names
    from `names`, job id -> name), how many others took part."""
    jobs, others = [], 0
    for job in observed.state.jobs:
        spec = job.spec
        if user.role != "admin" and spec.tenant != user.tenant:
            others += 1
            continue
        jobs.append(
            WhatIfJob(
                id=spec.job_id,
                name=names.get(spec.job_id, spec.job_id),
                tenant=spec.tenant,
                status=observed.statuses.get(spec.job_id, job.status.value),
                predicted_finish_s={p: f.finish_s.get(spec.job_id) for p, f in forecasts.items()},
                not_started={
                    p: f.not_started[spec.job_id]
                    for p, f in forecasts.items()
                    if spec.job_id in f.not_started
                },
            )
        )
    notes = list(APPROXIMATIONS) + list(observed.approximations)
    moved = max((len(f.notes) for f in forecasts.values()), default=0)
    if moved:
        notes.append(f"{moved} running job(s) could not keep their GPUs and wait instead")
    return WhatIfPublic(
        now_s=observed.state.now_s,
        clock=observed.clock,
        active_policy=observed.active_policy,
        cluster=observed.cluster,
        policies={name: _figures(f) for name, f in forecasts.items()},
        jobs=jobs,
        other_tenants_jobs=others,
        approximations=notes,
    )


def _figures(f: Forecast) -> PolicyForecast:
    return PolicyForecast(
        avg_jct_s=f.mean_jct_s,
        median_jct_s=f.median_jct_s,
        p95_jct_s=f.p95_jct_s,
        makespan_s=f.makespan_s,
        wall_s=f.wall_s,
        unfinished=f.unfinished,
        stopped=f.stopped,
    )
