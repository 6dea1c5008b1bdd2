"""Cluster specs: build a `Cluster` from a YAML file, a preset, a shorthand or a CSV.

Called by the CLI (`--cluster`) and by anything that needs a cluster to replay
on; `describe` gives the CLI its one-paragraph summary. See docs/clusters.md.

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
    gpu_types:                       # optional; presets/gpus.yaml models are known
      MyGPU: {mem_mib: 24576, nvlink_gbps: 0, pcie_gbps: 252, speed: 0.8}
    node_types:                      # optional; preset node types are known
      mybox:
        gpu: V100-SXM2-16GB          # a known model, or a mapping: model plus any
                                     # of mem_mib, nvlink_gbps, pcie_gbps, speed
                                     # (all but speed needed for an unknown model)
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
from collections import Counter
from pathlib import Path

from controller.model.cluster import Cluster, Node
from controller.spec import clos
from controller.spec.csv_spec import load_csv
from controller.spec.types import (
    GENERIC_NIC_GBPS,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
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
    "describe",
    "generic_node_type",
    "load_cluster",
    "named_cluster",
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
    return _named(arg, files=True)


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
    return _named(name, files=False)


def _named(arg: str, *, files: bool) -> Cluster:
    if m := clos.LINGJUN_NAME.fullmatch(arg):
        node_type = presets()[1][clos.LINGJUN_NODE_TYPE]
        return clos.lingjun_cluster(node_type, lanes=int(m[1] or 1))
    if arg.startswith("clos:"):
        return clos.shorthand_cluster(arg, presets()[1][clos.CLOS_NODE_TYPE])
    if m := SHORTHAND.fullmatch(arg):
        nodes, gpus = int(m[1]), int(m[2])
        if nodes < 1 or gpus < 1:
            raise ClusterSpecError("NODESxGPUS needs at least one node and one GPU", source=arg)
        if nodes > MAX_NODES or gpus > MAX_GPUS_PER_NODE:
            raise ClusterSpecError(
                f"NODESxGPUS takes at most {MAX_NODES} nodes of at most {MAX_GPUS_PER_NODE} GPUs",
                source=arg,
            )
        return uniform_cluster(arg, generic_node_type(gpus), nodes)
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
    return uniform_cluster(arg, node_types[name], count, prefix=name)


def preset_names() -> list[str]:
    return sorted(presets()[1])


def describe(cluster: Cluster) -> str:
    """A few lines for people: nodes by kind, racks by size and uplink."""
    lines = [
        f"cluster {cluster.name}: {_count(len(cluster.nodes), 'node')}, "
        f"{_count(cluster.num_gpus, 'GPU')}, {_count(len(cluster.racks), 'rack')}"
    ]
    kinds: Counter[tuple[str, int, int, float, str, float]] = Counter()
    for node in cluster.nodes:
        t = node.gpu_type
        kinds[(t.name, node.num_gpus, t.mem_mib, t.speed, _pair_kinds(node), node.nic_gbps)] += 1
    for (gpu, n, mem_mib, speed, pairs, nic), count in sorted(kinds.items()):
        inside = f", GPU pairs {pairs}" if pairs else ""
        lines.append(
            f"  {_count(count, 'node')} x {n} {gpu} ({mem_mib // 1024} GiB, speed {speed:g}x V100)"
            f"{inside}, NIC {nic:g} Gbit/s"
        )
    members: dict[int, list[Node]] = {}
    for node in cluster.nodes:
        members.setdefault(node.rack, []).append(node)
    racks: Counter[tuple[int, float, float, int]] = Counter()
    for i, rack in enumerate(cluster.racks):
        nodes = members.get(i, [])
        nic = sum(n.nic_gbps for n in nodes)
        racks[(len(nodes), rack.uplink_gbps, nic / rack.uplink_gbps, rack.uplinks)] += 1
    for (n, uplink, ratio, lanes), count in sorted(racks.items(), reverse=True):
        lines.append(
            f"  {_count(count, 'rack')} x {_count(n, 'node')}, uplink {uplink:g} Gbit/s"
            f"{_lanes(uplink, lanes)} (oversubscription {ratio:.3g}:1)"
        )
    for g, group in enumerate(cluster.groups):
        under = sum(r.uplink_gbps for r in cluster.racks if r.group == g)
        lines.append(
            f"  group {group.name}: {_count(sum(r.group == g for r in cluster.racks), 'rack')}, "
            f"core uplink {group.uplink_gbps:g} Gbit/s{_lanes(group.uplink_gbps, group.uplinks)}"
            f" (oversubscription {under / group.uplink_gbps:.3g}:1)"
        )
    return "\n".join(lines)


def _lanes(gbps: float, lanes: int) -> str:
    return "" if lanes == 1 else f" in {lanes} ECMP lanes of {gbps / lanes:g}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _pair_kinds(node: Node) -> str:
    """The node's kinds of GPU pair link, nearest first: `NV2/NV1/SYS`."""
    links = {link for row in node.links for link in row if link is not None}
    nearest = sorted(links, key=lambda link: (-link.nvlinks, link.pcie))
    return "/".join(dict.fromkeys(link.label() for link in nearest))
