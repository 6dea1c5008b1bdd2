"""The simulator backend: traces replayed on a virtual clock (controller/sim/).

Imported by the CLI (`gpuflow replay`, `compare`), api/replays/run.py, controller.whatif,
controller.live (local mode), controller.failures, bench/ and tests. The parts, from
the bottom up (docs/architecture.md, "Simulator"):

- `config`: what a simulation is given (SimConfig, NodeEvent, ResumedJob);
- `job`: one job's record and its progress between events;
- `ordered`: the waiting jobs kept in each policy's order between rounds;
- `events`: arrivals, timed events and the clock (when rounds run);
- `table`: the active jobs and the views a round's snapshot is made of;
- `accounting`: GPU-second integrals, the timeline, job outcomes;
- `sharing`: who is packed on each shared GPU;
- `bandwidth`: multi-node jobs' inter-node rates under a network allocator;
- `parts`: `SimParts`, the shared parts above built once and read by those below;
- `speed`: job speeds from the rate model, GPU neighbours and network;
- `runs`: applying actions (starts, stops, finishes of job runs);
- `nodes`: failures, recoveries, cordons and drains;
- `rounds`: the Backend a round decides on (observe, apply) and its reasons;
- `simulator`: `Simulator`, the loop and the Backend a round decides on, with the
  public surface local mode reads.
"""

from controller.sim.config import NodeEvent, ResumedJob, SimConfig
from controller.sim.job import SimJob
from controller.sim.simulator import Simulator
from controller.sim.speed import GAIN_STEP
from controller.sim.table import RunningUsage

__all__ = [
    "GAIN_STEP",
    "NodeEvent",
    "ResumedJob",
    "RunningUsage",
    "SimConfig",
    "SimJob",
    "Simulator",
]
