"""Resource-aware placement as FGD measured it: nodes and tasks with CPU, memory,
GPU model and milli-GPUs, FGD's placers by name, and its experiment.

- `resources`: `NodeResources`, `TaskRequest` (stdlib; built by the openb loaders in
  `controller.traces.alibaba`);
- `state`: `ClusterState`, the free resources as numpy arrays, and the filter;
- `fragmentation`: FGD's target workload and fragmentation measure;
- `placers`: FGD's `random`, `best-fit`, `dot-product`, `gpu-packing`,
  `gpu-clustering`, `fgd`;
- `aware`: gpuflow's `fragmentation-aware`, FGD's gradient over CPU, memory and GPUs
  against the mix learned online;
- `registry`: all of them by name (`PACKERS`);
- `experiment`: the arrival experiment of FGD's §6 (`run_experiment`).

gpuflow's GPU-only placers (`controller.placement`) and its policies do not yet read
these resources; see docs/placement.md.
"""
