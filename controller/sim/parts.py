"""The simulator's shared parts: the one object the loop builds and every part reads.

`Simulator.__init__` (controller/sim/simulator.py) makes a `SimParts` of the cluster,
the configuration, the rate model, the clock, the event queue, the job table, the free
pool, the accounts, the GPU sharers and the inter-node rates, and hands it to the parts
above them (`Speeds`, `JobRuns`, `NodeStates`, `Rounds`), which read what they need
from it instead of taking each as its own argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.model import Cluster, GpuPool
from controller.rates import RateModel
from controller.sim.accounting import Accounts
from controller.sim.bandwidth import InterNodeRates
from controller.sim.config import SimConfig
from controller.sim.events import Clock, EventQueue
from controller.sim.sharing import GpuSharers
from controller.sim.table import JobTable


@dataclass(frozen=True)
class SimParts:
    cluster: Cluster
    config: SimConfig
    rates: RateModel
    clock: Clock
    events: EventQueue
    table: JobTable
    pool: GpuPool
    accounts: Accounts
    sharers: GpuSharers
    network: InterNodeRates
