"""Network bandwidth sharing by coflow: who gets which rate on the links.

The allocators (`allocate`, and the per-family modules `fair`, `varys`, `aalo`,
`sincronia`) turn link capacities and the flows that cross them into a rate per flow.
They are called per event by a simulator (the coflow replay in `experiments.coflow`, the job
simulator for multi-node DL jobs) and keep no state between calls: what a policy
remembers (a coflow's attained service, a job's remaining time) comes in with the
`Coflow` records.

Units: rates and capacities in Gbit/s (unidirectional, as everywhere in gpuflow),
sizes in MB (10^6 bytes).
"""

from controller.network.allocators import ALLOCATORS, UnknownNetworkPolicyError, allocate
from controller.network.model import Coflow, Flow, LinkId, nic_down, nic_up, rack_down, rack_up

__all__ = [
    "ALLOCATORS",
    "Coflow",
    "Flow",
    "LinkId",
    "UnknownNetworkPolicyError",
    "allocate",
    "nic_down",
    "nic_up",
    "rack_down",
    "rack_up",
]
