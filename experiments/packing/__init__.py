"""FGD's placement experiment (Weng et al., USENIX ATC 2023, §6): resource-aware
packing of openb pods, apart from the scheduling core. Run by `gpuflow placement`
(gpuflow/placement_cmd.py) and bench/fgd.py; nothing in controller/, policies/,
operators/ or api/ imports it.

- `resources`: `NodeResources`, `TaskRequest` (stdlib);
- `openb`: the openb pod and node lists read into them, every resource kept;
- `state`: `ClusterState`, the free resources as numpy arrays, and the filter;
- `fragmentation`: FGD's target workload and fragmentation measure;
- `placers`: FGD's `random`, `best-fit`, `dot-product`, `gpu-packing`,
  `gpu-clustering`, `fgd`;
- `aware`: gpuflow's `fgd-cpu-aware`, FGD's gradient over CPU, memory and GPUs
  against the mix learned online;
- `registry`: all of them by name (`PACKERS`);
- `experiment`: the arrival experiment of FGD's §6 (`run_experiment`).

The replay's placers (`controller.placement`) place GPUs and filter nodes by CPU and
memory; they do not score them by these resources (docs/placement.md).
"""
