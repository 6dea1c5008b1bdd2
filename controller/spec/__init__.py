"""Cluster specs: build a `Cluster` from a YAML file, a preset, a shorthand or a CSV.

Called by the CLI (`--cluster`) and by anything that needs a cluster to replay
on; `describe` and `cluster_summary` (controller.spec.summary) give `gpuflow
cluster` what it prints. See docs/clusters.md.

`load_cluster(arg)` accepts:

- a YAML cluster spec (`*.yaml`, `*.yml`; schema below);
- a preset node type: `dgx-h100`, `dgx-a100`, `dgx1-v100`, `g4dn-12xlarge`, `pcie4` alone means
  one rack of 4 such nodes, `PRESET:N` means N of them (`dgx-a100:32`);
- `lingjun`: the Alibaba Lingjun production topology (847 8-GPU hosts, 119 ToRs, 3
  aggregation groups; `controller.spec.clos`), and `clos:GxTxH`, a three-tier Clos of
  G groups x T ToRs x H `pcie4` hosts; either with `/ecmpK` has every uplink in K
  equal-cost lanes (`lingjun/ecmp8`, controller.network.ecmp);
- `NODESxGPUS` (`16x4`, `256x8`): generic PCIe servers of V100-PCIe GPUs
  (`pcie_topology`), with one `GENERIC_NIC_GBPS` NIC each;
- a Tiresias simulator `cluster_spec.csv`
  (`num_switch,num_node_p_switch,num_gpu_p_node[,num_cpu_p_node,mem_p_node]`,
  one row; a switch is a rack, the nodes are generic PCIe servers);
- an Alibaba openb node list (`sn,cpu_milli,memory_mib,gpu,model`, from
  cluster-trace-gpu-v2023; nodes without GPUs are dropped).

Nodes from `PRESET:N`, shorthands and CSVs fill racks of `RACK_SIZE`, uplinks
non-blocking (oversubscription 1).

The YAML schema (bandwidths unidirectional, Gbit/s)::

    name: my-cluster                 # optional; default: the file name
    sharing: mps                     # optional: mps (default) or time-slicing, how
                                     # jobs sharing a GPU run (controller.model.sharing)
    gpu_types:                       # optional; the GPU catalogue's models
                                     # (controller.model.gpus) and presets/gpus.yaml's
                                     # are known
      MyGPU: {mem_mib: 24576, nvlink_gbps: 0, pcie_gbps: 252, speed: 0.8}
    node_types:                      # optional; preset node types are known
      mybox:
        gpu: V100-SXM2-16GB          # a known model (gpuflow's name or NVML's,
                                     # "Tesla V100-SXM2-16GB"), or a mapping: model
                                     # plus any of mem_mib, nvlink_gbps, pcie_gbps,
                                     # speed (all but speed for an unknown model)
        sharing: time-slicing        # optional; default: the cluster's
        nic_gbps: 100
        gpus: 8                      # optional with a topology, else required
        numa: [0,0,0,0,1,1,1,1]      # optional; default per socket or all 0
        topology: |                  # optional `nvidia-smi topo -m` GPU matrix;
          X NV1 ...                  # default: the generic PCIe layout
    racks:
      - name: r0                     # optional; default r<index>
        oversubscription: 2          # >= 1, default 1: uplink = sum of NICs / ratio
        nodes:
          - {type: dgx-a100, count: 4, name_prefix: a}  # count 1, prefix = type

Nodes are named `<prefix>-<k>`, k counting per prefix over the whole cluster. GPU
UUIDs are deterministic fakes, `GPU-<uuid5 of cluster/node/index>`. Errors are
`ClusterSpecError`s that name the file, the line of the offending key (or the
CSV line) and the field.
"""

from __future__ import annotations

import csv
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from controller.model.cluster import Cluster
from controller.spec import clos
from controller.spec.csv_spec import load_csv
from controller.spec.summary import cluster_summary, describe
from controller.spec.types import (
    GENERIC_NIC_GBPS,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_LANES,
    MAX_NODES,
    MAX_SPEC_BYTES,
    PRESET_COUNT,
    PRESET_NODES,
    RACK_SIZE,
    SHORTHAND,
    ClusterSpecError,
    NodeType,
    pcie_topology,
    uniform_cluster,
)
from controller.spec.yaml_spec import generic_node_type, load_yaml, presets

__all__ = [
    "GENERIC_NIC_GBPS",
    "MAX_GPUS",
    "MAX_SPEC_BYTES",
    "PRESET_NODES",
    "RACK_SIZE",
    "ClusterSpecError",
    "NodeType",
    "cluster_summary",
    "describe",
    "generic_node_type",
    "load_cluster",
    "named_cluster",
    "named_cluster_gpus",
    "pcie_topology",
    "preset_names",
]


def load_cluster(arg: str) -> Cluster:
    """Build the cluster that `arg` names: a file, a preset, `PRESET:N` or `NODESxGPUS`.

    For the CLI, whose user names their own files; a service takes `named_cluster`."""
    path = Path(arg)
    if path.suffix.lower() in {".yaml", ".yml", ".csv"} or path.exists():
        _check_spec_file(path, arg)
        try:
            if path.suffix.lower() == ".csv":
                return load_csv(path)
            return load_yaml(path)
        except UnicodeDecodeError as exc:
            raise ClusterSpecError(f"not UTF-8 text: {exc.reason}", source=arg) from None
        except csv.Error as exc:
            raise ClusterSpecError(f"not a CSV file: {exc}", source=arg) from None
        except OSError as exc:
            raise ClusterSpecError(f"cannot read: {exc.strerror or exc}", source=arg) from None
    return _named(arg, files=True)()


def _check_spec_file(path: Path, arg: str) -> None:
    """Refuse a missing, special (FIFO, device, directory) or oversized file by stat
    alone: opening a FIFO blocks for a writer and /dev/zero never ends."""
    try:
        info = os.stat(path)
    except OSError:
        raise ClusterSpecError("no such file", source=arg) from None
    if not stat.S_ISREG(info.st_mode):
        raise ClusterSpecError("not a regular file", source=arg)
    if info.st_size > MAX_SPEC_BYTES:
        raise ClusterSpecError(f"larger than {MAX_SPEC_BYTES} bytes", source=arg)


def named_cluster(name: str) -> Cluster:
    """The cluster a preset, `PRESET:N` or `NODESxGPUS` names, never touching the
    filesystem for `name`: what the API resolves a caller's cluster with (a caller must
    not make the server open its files). Anything else is a ClusterSpecError."""
    return _named(name, files=False)()


def named_cluster_gpus(name: str) -> int:
    """The GPUs of the cluster `named_cluster(name)` builds, found without building it
    (microseconds where building 100,000 GPUs takes seconds): what the API checks a
    request with, leaving the building to the replay's runner. The same names are
    refused, with the same ClusterSpecError."""
    return _named(name, files=False).gpus


@dataclass(frozen=True, slots=True)
class _Named:
    """A cluster name checked, its size known, not yet built: call it to build."""

    gpus: int
    build: Callable[[], Cluster]

    def __call__(self) -> Cluster:
        return self.build()


def _named(arg: str, *, files: bool) -> _Named:
    if m := clos.LINGJUN_NAME.fullmatch(arg):
        node_type = presets()[1][clos.LINGJUN_NODE_TYPE]
        lanes = _lanes(int(m[1] or 1), arg)
        hosts = sum(len(t.hosts) for t in clos.lingjun_tors()[1])
        return _sized(arg, hosts * len(node_type.numa), partial(_lingjun, node_type, lanes))
    if arg.startswith("clos:"):
        node_type = presets()[1][clos.CLOS_NODE_TYPE]
        groups, per_group, hosts, lanes = clos.parse_shorthand(arg)
        _lanes(lanes, arg)
        gpus = groups * per_group * hosts * len(node_type.numa)
        return _sized(arg, gpus, partial(clos.shorthand_cluster, arg, node_type))
    if m := SHORTHAND.fullmatch(arg):
        nodes, gpus = int(m[1]), int(m[2])
        if nodes < 1 or gpus < 1:
            raise ClusterSpecError("NODESxGPUS needs at least one node and one GPU", source=arg)
        if nodes > MAX_NODES or gpus > MAX_GPUS_PER_NODE:
            raise ClusterSpecError(
                f"NODESxGPUS takes at most {MAX_NODES} nodes of at most {MAX_GPUS_PER_NODE} GPUs",
                source=arg,
            )
        return _sized(
            arg, nodes * gpus, lambda: uniform_cluster(arg, generic_node_type(gpus), nodes)
        )
    name, count = arg, PRESET_NODES
    if m := PRESET_COUNT.fullmatch(arg):
        name, count = m[1], int(m[2])
        if not 1 <= count <= MAX_NODES:
            raise ClusterSpecError(f"PRESET:N needs 1 <= N <= {MAX_NODES}", source=arg)
    node_types = presets()[1]
    if name not in node_types:
        if not files:
            raise ClusterSpecError(
                f"unknown cluster {arg!r} (presets: {', '.join(preset_names())}; "
                "or PRESET:N, e.g. dgx-a100:32; or NODESxGPUS, e.g. 16x4)"
            )
        raise ClusterSpecError(
            "not a file, preset or shorthand; expected a .yaml or .csv file, a preset "
            f"({', '.join(preset_names())}), PRESET:N (e.g. dgx-a100:32) "
            "or NODESxGPUS (e.g. 16x4)",
            source=arg,
        )
    node_type = node_types[name]
    return _sized(
        arg,
        count * len(node_type.numa),
        lambda: uniform_cluster(arg, node_type, count, prefix=name),
    )


def _sized(arg: str, gpus: int, build: Callable[[], Cluster]) -> _Named:
    """`assemble`'s bound on the GPUs in all, applied before anything is built."""
    if gpus > MAX_GPUS:
        raise ClusterSpecError(f"{gpus} GPUs in all: more than {MAX_GPUS}", source=arg)
    return _Named(gpus, build)


def _lanes(lanes: int, arg: str) -> int:
    """`/ecmpK` lanes, within clos_cluster's bound."""
    if not 1 <= lanes <= MAX_LANES:
        raise ClusterSpecError(f"lanes must be in 1..{MAX_LANES}, got {lanes}", source=arg)
    return lanes


def _lingjun(node_type: NodeType, lanes: int) -> Cluster:
    return clos.lingjun_cluster(node_type, lanes=lanes)


def preset_names() -> list[str]:
    return sorted(presets()[1])
