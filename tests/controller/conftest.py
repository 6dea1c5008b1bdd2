"""Helpers shared by the cluster-spec tests (tests/controller/test_spec.py and
tests/controller/test_spec_files.py): a spec file written from indented text, and a
rack's NIC total."""

from __future__ import annotations

import textwrap
from pathlib import Path

from controller.model.cluster import Cluster


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return str(path)


def rack_nic_gbps(cluster: Cluster, rack: int) -> float:
    return sum(n.nic_gbps for n in cluster.nodes if n.rack == rack)
