"""Cluster mode's what-if state from the Nodes: cordons and drains carried over
(api.whatif_cluster.live_state, pure: no server)."""

from __future__ import annotations

from api.whatif_cluster import live_state
from operators import crd
from tests.operators.builders import make_node_body


def test_cordoned_and_draining_nodes_reach_the_state() -> None:
    ready, cordoned, draining = (make_node_body(f"node-{i}") for i in range(3))
    cordoned["spec"] = {"unschedulable": True}
    draining["spec"] = {"unschedulable": True}
    draining["metadata"]["annotations"][crd.ANN_NODE_DRAIN] = "root"
    state = live_state([], [ready, cordoned, draining], 100.0, "fifo").state
    assert state.cordoned_nodes == frozenset({1, 2})
    assert state.draining_nodes == frozenset({2})
    assert state.down_nodes == frozenset()
