"""Waiting jobs in a policy's order, kept ordered by the backend from round to round.

Most policies serve the jobs that wait in an order that does not change while they
wait: FIFO by priority and submission, SRTF by remaining work at rest, Gandiva by
the time a job began waiting (round-robin). Sorting every waiting job each round
makes a round cost the length of the queue; a backend that keeps the waiting jobs
ordered between rounds (the simulator: controller.sim.ordered) hands them out in
order instead, and a policy that stops once the GPUs are taken reads only the head.

A policy names its order as a `WaitingKey`: a module-level function (the backend
keeps one ordered index per function object) from a job's view to a sort key that
stays the same while the job waits and ends with the job id, so that no two jobs
tie. It reads them through `Snapshot.waiting_in_order` and `waiting_by_size`, which
fall back to sorting `Snapshot.waiting()` when the backend keeps no index (the
Kubernetes backend, tests that build a snapshot by hand): the same jobs in the same
order either way.

A policy that keeps more than an order between rounds (Tiresias' queues and
promotions) asks instead which waiting jobs changed since its last round
(`Snapshot.waiting_changes`) and re-ranks only those.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from controller.model.job import JobView

# A job's place in a policy's order while it waits; constant while it waits, unique.
WaitingKey = Callable[[JobView], tuple[Any, ...]]


class WaitingIndex(Protocol):
    """The backend's waiting jobs, ordered by any key a policy asks for. Valid for the
    round of the snapshot that carries it (until the backend applies the plan)."""

    def in_order(self, key: WaitingKey) -> Iterator[JobView]:
        """Every waiting job, by `key`, produced lazily."""
        ...

    def by_size(self, key: WaitingKey) -> Mapping[int, Iterator[JobView]]:
        """The waiting jobs by the GPUs they ask for (`spec.num_gpus`), each size's
        jobs by `key`, produced lazily; only sizes some job asks for."""
        ...

    def gpus_asked(self) -> int:
        """The GPUs all waiting jobs ask for together."""
        ...

    def changes_since(self, mark: int | None) -> tuple[int, Sequence[str] | None]:
        """The index's mark now, and the ids of the jobs that began or stopped waiting,
        or whose waiting view was rebuilt, since `mark` (a mark it returned before),
        oldest first, possibly repeated; None for the ids when it cannot tell (no
        mark, or one older than the changes it keeps): read every waiting job then."""
        ...
