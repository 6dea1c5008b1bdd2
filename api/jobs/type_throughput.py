"""A job's speed on each GPU type it has run on, as GET /jobs/{id} shows it
(`JobPublic.type_throughput`, the dashboard's job page).

The backends read it (api.backends.JobBackend.type_throughput) and answer with
`type_throughput_public`: local mode from the simulator (controller/live.py
`LiveCluster.type_throughput`), cluster mode (api.cluster_mode.backend) from the DLJob the API
follows, whose `status.typeThroughput` the operator records from the job's own reports
(operators/dljobs/type_throughput.py). Kept apart from both backends, which api.backends
must not import.
"""

from __future__ import annotations

from collections.abc import Iterable

from api.schemas.jobs import TypeThroughputPublic
from controller.model.type_throughput import TypeThroughput


def type_throughput_public(
    items: Iterable[TypeThroughput], source: str
) -> list[TypeThroughputPublic]:
    return [
        TypeThroughputPublic(
            gpu_type=t.gpu_type,
            steps_per_s=t.steps_per_s,
            samples_per_s=t.samples_per_s,
            gpus=t.gpus,
            batch_size=t.batch_size,
            measured_s=t.measured_s,
            source=source,
        )
        for t in items
    ]
