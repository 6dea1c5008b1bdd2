"""Three-tier Clos clusters (controller.spec.clos) and the links a ring crosses in them."""

from __future__ import annotations

import pytest

from controller.model import Cluster, Group, Rack
from controller.network.jobs import NetJob, link_capacity, ring_flows
from controller.spec import ClusterSpecError, load_cluster, named_cluster
from gpuflow.cli import main


def test_lingjun_has_the_datasets_hosts_tors_and_groups() -> None:
    c = named_cluster("lingjun")
    assert (len(c.nodes), c.num_gpus, len(c.racks), len(c.groups)) == (847, 6776, 119, 3)
    tors = sorted(sum(r.group == g for r in c.racks) for g in range(3))
    per_group_hosts = sorted(
        sum(1 for n in c.nodes if c.racks[n.rack].group == g) for g in range(3)
    )
    assert per_group_hosts == [179, 306, 362] and sum(tors) == 119
    # ToRs non-blocking; groups 2:1 towards the core.
    for g, group in enumerate(c.groups):
        under = sum(r.uplink_gbps for r in c.racks if r.group == g)
        assert group.uplink_gbps == pytest.approx(under / 2)
    assert {len([n for n in c.nodes if n.rack == r]) for r in range(119)} <= set(range(2, 9))


def test_clos_shorthand_builds_groups_of_tors_with_summed_uplinks() -> None:
    c = load_cluster("clos:2x3x4")
    assert len(c.nodes) == 24 and [r.group for r in c.racks] == [0, 0, 0, 1, 1, 1]
    assert c.racks[0].uplink_gbps == pytest.approx(4 * 25.0 / 2)
    assert c.groups[1].uplink_gbps == pytest.approx(3 * 50.0 / 2)


def test_a_ring_across_groups_crosses_each_groups_core_link_once_each_way() -> None:
    c = load_cluster("clos:2x2x2")  # nodes 0-3 in group 0, 4-7 in group 1
    flows = ring_flows(c, NetJob("j", (0, 2, 4, 6), grad_mib=100.0))
    links = [link for f in flows for link in f.links]
    assert links.count(("group-up", 0)) == 1 and links.count(("group-down", 1)) == 1
    assert links.count(("group-up", 1)) == 1 and links.count(("group-down", 0)) == 1
    assert link_capacity(c, ("group-up", 1)) == pytest.approx(c.groups[1].uplink_gbps)
    # Within one group no core link is crossed.
    inside = ring_flows(c, NetJob("k", (0, 2), grad_mib=100.0))
    assert all(not link[0].startswith("group") for f in inside for link in f.links)


@pytest.mark.parametrize("arg", ["clos:0x2x2", "clos:2x2"])
def test_bad_clos_shorthand_is_refused_by_name(arg: str) -> None:
    with pytest.raises(ClusterSpecError, match="clos"):
        named_cluster(arg)


def test_a_rack_outside_the_groups_is_refused() -> None:
    with pytest.raises(ValueError, match="group index 2"):
        Cluster("c", (), (Rack("r", 10.0, group=2),), (Group("g", 10.0),))


def test_cli_describes_lingjun(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "lingjun"]) == 0
    out = capsys.readouterr().out
    assert "847 nodes, 6776 GPUs, 119 racks" in out and "group G6-P10" in out
