"""What a caller sees of other tenants' jobs: counts, never ids. Applied when rendering.

Schedulers explain a wait by naming the job in the way ("waiting behind job 3f2a... at
the head of the FIFO queue", "time-sliced out; job 9c1d... runs on its GPUs"), and a
node lists the jobs on it; the backends keep those as they are (they serve every
tenant and admins), and the routes that show them to one user pass them through here:
a job id the caller may not see (`api.deps.can_see`) becomes "another tenant's job",
and a node's jobs list keeps the caller's own, counting the others. Called by
api.routes.jobs (reasons, event details) and api.routes.cluster (/nodes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.schemas.cluster import NodePublic
from api.schemas.timeline import JobRef
from api.store.models import Job, User

# "job <id>" as the policies (policies/*.py) and the simulator write it.
JOB_REF = re.compile(r"\bjob ([A-Za-z0-9][A-Za-z0-9_-]*)")
OTHER_JOB = "another tenant's job"


def visible_ids(session: Session, user: User, ids: Iterable[str]) -> set[str]:
    """The ids among `ids` of jobs `user` may see (all of them for an admin)."""
    wanted = set(ids)
    if user.role == "admin" or not wanted:
        return wanted
    query = select(Job.id).where(Job.id.in_(wanted), Job.tenant == user.tenant)
    return set(session.scalars(query))


def redact_texts(session: Session, user: User, texts: list[str | None]) -> list[str | None]:
    """`texts` with every "job <id>" the caller may not see replaced (one query)."""
    refs = {m[1] for text in texts if text for m in JOB_REF.finditer(text)}
    if not refs or user.role == "admin":
        return texts
    seen = visible_ids(session, user, refs)

    def swap(m: re.Match[str]) -> str:
        return m[0] if m[1] in seen else OTHER_JOB

    return [text and JOB_REF.sub(swap, text) for text in texts]


def job_refs(session: Session, user: User, ids: set[str]) -> dict[str, JobRef]:
    """Each job id as the caller may see it: id and name, or neither (one query each)."""
    if not ids:
        return {}
    seen = visible_ids(session, user, ids)
    rows = session.execute(select(Job.id, Job.name).where(Job.id.in_(seen)))
    names = {r.id: r.name for r in rows}
    hidden = JobRef(id=None, name=None)
    return {j: JobRef(id=j, name=names.get(j)) if j in seen else hidden for j in ids}


def redact_nodes(session: Session, user: User, nodes: list[NodePublic]) -> list[NodePublic]:
    """Each node with only the caller's jobs listed, the others counted in other_jobs,
    and each GPU's share of another tenant's job kept without its id (`job`: null);
    a share of a job the caller may see names the job and its tenant (one query), so
    that the Cluster page can tell who holds a GPU without listing every job.

    The shares are named and redacted in place: the backends build the nodes afresh
    for each request (`JobBackend.describe`), and at 1,000 nodes x 8 GPUs copying
    every share cost ~0.2 s where assigning costs ~10 ms (measured on 6,000 shares)."""
    ids = {s.job for n in nodes for g in n.gpu_list for s in g.shares if s.job is not None}
    ids.update(j for n in nodes for j in n.jobs)
    owners = _owners(session, user, ids)
    # An admin sees every id, also of a job the database does not hold (a DLJob made
    # with kubectl): named by id alone.
    seen = ids if user.role == "admin" else set(owners)
    for node in nodes:
        for gpu in node.gpu_list:
            for share in gpu.shares:
                if share.job is not None and share.job in seen:
                    share.name, share.tenant = owners.get(share.job, (None, None))
                else:
                    share.job = share.name = share.tenant = None
    if user.role == "admin":
        return nodes
    return [
        n.model_copy(
            update={
                "jobs": [j for j in n.jobs if j in seen],
                "other_jobs": n.other_jobs + sum(1 for j in n.jobs if j not in seen),
            }
        )
        for n in nodes
    ]


def _owners(session: Session, user: User, ids: set[str]) -> dict[str, tuple[str, str]]:
    """Name and tenant of each job among `ids` that `user` may see (an admin: all)."""
    if not ids:
        return {}
    query = select(Job.id, Job.name, Job.tenant).where(Job.id.in_(ids))
    if user.role != "admin":
        query = query.where(Job.tenant == user.tenant)
    return {r.id: (r.name, r.tenant) for r in session.execute(query)}
