"""Three-tier Clos clusters: hosts under ToRs under aggregation groups under one core.

Called by `controller.spec.load_cluster` / `named_cluster` for the names
`clos:GxTxH` (G aggregation groups of T ToRs of H hosts, `pcie4` hosts, for tests
and benchmarks) and `lingjun` (each optionally `/ecmpK`), and by anyone building
such a cluster in code (`clos_cluster`).

Links: each host's NIC; each ToR's uplinks to its group's aggregation switches,
summed into one capacity (hosts' NICs / `tor_oversubscription`); each group's uplinks
to the core (its ToRs' uplinks / `group_oversubscription`). ECMP is taken as ideal
spreading over the equal-cost uplinks of a tier, so a tier is one link per direction
of the summed capacity, unless the name asks for lanes: `clos:GxTxH/ecmpK` and
`lingjun/ecmpK` split every ToR and group uplink into K equal-cost links, each flow
on the one ECMP hashing gives it, or Crux's path selection under `--network crux`
(controller.network.ecmp, controller.network.phases.crux_paths; docs/network.md).

`lingjun` is the topology of the Alibaba production cluster released with Crux (Cao
et al., SIGCOMM 2024; github.com/alibaba/alibaba-lingjun-dataset-2023, `topo.csv`,
Apache-2.0), shipped as controller/presets/lingjun-topo.csv: 847 hosts, each under
a ToR (ASW) in one of 3 aggregation groups (PSW) under one core (DSW); 119 ToRs of
2-8 hosts. The dataset gives no server model or link speeds. gpuflow assumes 8 GPUs
per host, as Crux describes its hosts (§2.1 and its testbed of 8-GPU servers), of
the `dgx-a100` preset (NVSwitch, 8 x 200 Gbit/s NICs summed to 1,600), ToRs
non-blocking (1:1) and groups 2:1 oversubscribed towards the core; all three are
arguments of `lingjun_cluster`.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from collections.abc import Sequence
from importlib import resources

from controller.model.cluster import Cluster, Group
from controller.spec.types import MAX_LANES, ClusterSpecError, NodeType, RackPlan, assemble

CLOS_SHORTHAND = re.compile(r"clos:(\d+)x(\d+)x(\d+)(?:/ecmp(\d+))?")
LINGJUN = "lingjun"
LINGJUN_NAME = re.compile(r"lingjun(?:/ecmp(\d+))?")
LINGJUN_FILE = "lingjun-topo.csv"
# Assumptions for the Lingjun cluster (the dataset has no link speeds): see above.
LINGJUN_NODE_TYPE = "dgx-a100"
LINGJUN_TOR_OVERSUBSCRIPTION = 1.0
LINGJUN_GROUP_OVERSUBSCRIPTION = 2.0
# Defaults of the `clos:GxTxH` shorthand: 4-GPU PCIe hosts with a 25 GbE NIC, ToRs
# 2:1 and groups 2:1 oversubscribed, a small communication-bound fabric.
CLOS_NODE_TYPE = "pcie4"
CLOS_TOR_OVERSUBSCRIPTION = 2.0
CLOS_GROUP_OVERSUBSCRIPTION = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class Tor:
    """A ToR: its name, its aggregation group's index and its hosts' names."""

    name: str
    group: int
    hosts: tuple[str, ...]


def clos_cluster(
    name: str,
    node_type: NodeType,
    group_names: Sequence[str],
    tors: Sequence[Tor],
    *,
    tor_oversubscription: float,
    group_oversubscription: float,
    lanes: int = 1,
) -> Cluster:
    """A cluster of `tors` (racks) in `group_names` groups, every host of `node_type`;
    `lanes` equal-cost links per ToR uplink and per group uplink (ECMP; 1: each tier
    one summed link)."""
    for label, ratio in (
        ("tor_oversubscription", tor_oversubscription),
        ("group_oversubscription", group_oversubscription),
    ):
        if not ratio >= 1.0:
            raise ClusterSpecError(f"{label} must be >= 1, got {ratio}", source=name)
    if not 1 <= lanes <= MAX_LANES:
        raise ClusterSpecError(f"lanes must be in 1..{MAX_LANES}, got {lanes}", source=name)
    for tor in tors:
        if not 0 <= tor.group < len(group_names):
            raise ClusterSpecError(f"ToR {tor.name}: group {tor.group} out of range", source=name)
    plans = [
        RackPlan(tor.name, tor_oversubscription, tuple((h, node_type) for h in tor.hosts))
        for tor in tors
    ]
    flat = assemble(name, plans)
    racks = tuple(
        dataclasses.replace(rack, group=tor.group, uplinks=lanes)
        for rack, tor in zip(flat.racks, tors, strict=True)
    )
    groups = tuple(
        Group(
            g,
            sum(r.uplink_gbps for r in racks if r.group == index) / group_oversubscription,
            uplinks=lanes,
        )
        for index, g in enumerate(group_names)
    )
    return Cluster(flat.name, flat.nodes, racks, groups)


def shorthand_cluster(arg: str, node_type: NodeType) -> Cluster:
    """`clos:GxTxH[/ecmpK]`: G groups x T ToRs x H hosts named g<i>-t<j>-<k>, K lanes
    per uplink."""
    groups, per_group, hosts, lanes = parse_shorthand(arg)
    tors = [
        Tor(f"g{g}-t{t}", g, tuple(f"g{g}-t{t}-{h}" for h in range(hosts)))
        for g in range(groups)
        for t in range(per_group)
    ]
    return clos_cluster(
        arg,
        node_type,
        [f"g{g}" for g in range(groups)],
        tors,
        tor_oversubscription=CLOS_TOR_OVERSUBSCRIPTION,
        group_oversubscription=CLOS_GROUP_OVERSUBSCRIPTION,
        lanes=lanes,
    )


def parse_shorthand(arg: str) -> tuple[int, int, int, int]:
    """`clos:GxTxH[/ecmpK]` as (G, T, H, K), K 1 when not given; a ClusterSpecError
    unless each count is at least 1 (K's bound is clos_cluster's)."""
    m = CLOS_SHORTHAND.fullmatch(arg)
    if m is None:
        raise ClusterSpecError(
            "expected clos:GROUPSxTORSxHOSTS[/ecmpLANES], e.g. clos:2x4x8", source=arg
        )
    groups, per_group, hosts = int(m[1]), int(m[2]), int(m[3])
    if min(groups, per_group, hosts) < 1:
        raise ClusterSpecError("clos:GxTxH needs at least 1 of each", source=arg)
    return groups, per_group, hosts, int(m[4] or 1)


def lingjun_tors() -> tuple[list[str], list[Tor]]:
    """Groups and ToRs of the packaged Lingjun topology, in order of first appearance
    of each group and ToR in the file; hosts are named `<PSW>-<ASW>-<k>`."""
    text = resources.files("controller").joinpath("presets", LINGJUN_FILE).read_text("utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    groups: dict[str, int] = {}
    members: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        group = f"{row['DSW']}-{row['PSW']}"
        groups.setdefault(group, len(groups))
        hosts = members.setdefault((group, row["ASW"]), [])
        hosts.append(f"{row['PSW']}-{row['ASW']}-{len(hosts)}")
    tors = [
        Tor(f"{group}-{asw}", groups[group], tuple(hosts))
        for (group, asw), hosts in members.items()
    ]
    tors.sort(key=lambda t: t.group)  # stable: file order within a group
    return list(groups), tors


def lingjun_cluster(
    node_type: NodeType,
    *,
    tor_oversubscription: float = LINGJUN_TOR_OVERSUBSCRIPTION,
    group_oversubscription: float = LINGJUN_GROUP_OVERSUBSCRIPTION,
    lanes: int = 1,
) -> Cluster:
    """The Lingjun cluster (module docstring) with hosts of `node_type`, its uplinks
    in `lanes` equal-cost links each (named `lingjun/ecmp<lanes>` when more than 1)."""
    groups, tors = lingjun_tors()
    return clos_cluster(
        LINGJUN if lanes == 1 else f"{LINGJUN}/ecmp{lanes}",
        node_type,
        groups,
        tors,
        tor_oversubscription=tor_oversubscription,
        group_oversubscription=group_oversubscription,
        lanes=lanes,
    )
