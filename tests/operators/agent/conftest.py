"""The `link` fixture: two network namespaces joined by a veth pair (netns.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.operators.agent.netns import POD_IP, SERVER_IP, Link, leaf_qdisc, sh


@pytest.fixture(scope="module")
def link() -> Iterator[Link]:
    pid = os.getpid()
    client_ns, server_ns = f"gf-a-{pid}", f"gf-b-{pid}"
    client_dev, server_dev = f"gfa{pid}", f"gfb{pid}"
    try:
        sh("ip", "netns", "add", client_ns)
        sh("ip", "netns", "add", server_ns)
        sh("ip", "link", "add", client_dev, "netns", client_ns,
           "type", "veth", "peer", "name", server_dev, "netns", server_ns)  # fmt: skip
        for ns in (client_ns, server_ns):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", server_ns, "addr", "add", f"{SERVER_IP}/24", "dev", server_dev)
        for ip in POD_IP.values():
            sh("ip", "-n", client_ns, "addr", "add", f"{ip}/24", "dev", client_dev)
        sh("ip", "-n", client_ns, "link", "set", client_dev, "up")
        sh("ip", "-n", server_ns, "link", "set", server_dev, "up")
        yield Link(client_ns, server_ns, client_dev, leaf_qdisc(client_ns, client_dev))
    finally:
        # Deleting a namespace deletes the veth end in it, and with it its peer.
        for ns in (client_ns, server_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
