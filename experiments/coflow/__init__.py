"""The coflow-benchmark replay: Facebook's coflow trace on a rack-port fabric, in the
model of coflowsim (Chowdhury's reference simulator), apart from the scheduling core.
Run by `gpuflow coflow` (gpuflow/coflow_cmd.py) and bench/coflow.py; nothing in
controller/, policies/, operators/ or api/ imports it.

- `trace`: the coflow-benchmark format read into coflows and flows;
- `replay`: the event loop (`replay`, `replay_reference`) and its result;
- `states`, `flows`: the flows in flight between events and the step they share;
- `ports`, `filling`: the network policies on a port fabric, compiled with numba.

The policies themselves are the scheduling core's (`controller.network.allocators`).
"""
