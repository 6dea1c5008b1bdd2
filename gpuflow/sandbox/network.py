"""The sandbox's pod network: a namespace per node and per pod, on one bridge (as root).

`gpuflow sandbox` (cluster.py) calls `NodeNetwork.create` before the kubelets start
and `teardown` at the end, also on errors; each node's ProcessKubelet (kubelet.py)
calls `pod_address`, `attach_pod` and `release_pod` for its pods. As root with
iproute2, as Kubernetes' kubenet lays it out:

- the host bridge `<tag>br` holds `10.233.X.1/24` (X a /24 no address of this
  machine uses);
- node i is a network namespace `<tag>-<node>` whose `eth0` is one end of a veth
  pair, the other end on the host bridge. Inside, `eth0` is a port of the node's own
  bridge `cbr0`, which holds the node's address `10.233.X.(10+i)`;
- each pod is a namespace `<tag>-<node>-<octet>` whose `eth0` holds the pod's own
  address and is one end of a veth pair, the other end (`v<octet>`) a port of its
  node's `cbr0`. Node i's pods take addresses from a block of its own (`pod_block`).

So every packet a pod sends to another node leaves by its node's `eth0`, where the
node agent shapes it by source address (operators/agent: HTB and u32 `match ip src`
on the bridge port see the bridged frames). All of it is one L2 segment on the /24:
no route leaves it and nothing is NATed; pods reach each other, the nodes and the
host's bridge address, nothing else. An address is reserved by pod uid the first
time anyone asks (the MASTER_ADDR rewrite may ask before the pod starts) and freed
with the pod's namespace. Not root (or no `ip`): no namespaces, every node and pod
is 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
PREFIX = "10.233"  # 10.233.0.0/16: a private range rarely used by Docker or clouds
FIRST_HOST = 10  # node i is .(10+i)
LAST_HOST = 254  # .255 is the /24's broadcast address
BLOCK_ALIGN = 16  # pod blocks start on a multiple of 16 past the nodes: easy to read
MAX_POD_BLOCK = 16  # node i's pods: .(first + block*i) .. +15 at most
NODE_BRIDGE = "cbr0"  # the bridge inside each node's namespace (kubenet's name)


class NetworkError(RuntimeError):
    """An `ip` command failed while building the network, or no address is free."""


def can_isolate() -> bool:
    """Root and iproute2: nodes and pods get namespaces."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def _free_subnet() -> str:
    """A 10.233.X prefix that no address or route of this machine is in."""
    shown = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, check=False
    ).stdout
    shown += subprocess.run(
        ["ip", "-4", "addr"], capture_output=True, text=True, check=False
    ).stdout
    used = {int(x) for x in re.findall(re.escape(PREFIX) + r"\.(\d+)\.", shown)}
    free = [x for x in range(1, 255) if x not in used]
    if not free:
        raise NetworkError(f"no free /24 in {PREFIX}.0.0/16")
    return f"{PREFIX}.{random.choice(free)}"


def pod_blocks(nodes: int) -> tuple[int, int]:
    """(first octet, block size) of the pods' addresses for `nodes` nodes: node i's
    pods get .(first + size*i) .. .(first + size*(i+1) - 1). The blocks follow the
    node addresses, 16-aligned, as large as the /24 allows (16 at most): 2 nodes
    give .16-.31 and .32-.47; 100 nodes one address each. NetworkError if the /24
    cannot give every node one."""
    first = -(-(FIRST_HOST + nodes) // BLOCK_ALIGN) * BLOCK_ALIGN
    size = min(MAX_POD_BLOCK, (LAST_HOST + 1 - first) // max(nodes, 1))
    if size < 1:
        raise NetworkError(f"{nodes} nodes leave no pod addresses in a /24")
    return first, size


def _names(*args: str) -> list[str]:
    """The first word of each line `ip ARGS` prints (netns list), or of each link name
    in `ip -o link` form ("3: name@peer: ..."), as names."""
    out = subprocess.run(["ip", *args], capture_output=True, text=True, check=False).stdout
    if args[:2] == ("-o", "link"):
        return [line.split(": ", 2)[1].split("@", 1)[0] for line in out.splitlines()]
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def remove_tagged(tag: str) -> list[str]:
    """Delete every namespace (`<tag>-...`) and host link (`<tag>br`, `<tag>h<i>`,
    `<tag>p<i>`) named after a sandbox's tag, however much of it a dead sandbox had
    made: what remains.py calls. A process still inside one of the namespaces (a pod's
    that left its process group, one started as the sandbox died) is killed first: a
    namespace deleted while a process holds it lives on, unnamed, with its veth. The
    names deleted; nothing without root and `ip`."""
    if not can_isolate():
        return []
    own = re.compile(re.escape(tag) + r"(br|[hp]\d+)")
    links = [n for n in _names("-o", "link", "show") if own.fullmatch(n)]
    # Pods' namespaces (the longer names) before their nodes', the bridge last.
    namespaces = sorted((n for n in _names("netns", "list") if n.startswith(tag + "-")), key=len)
    for ns in namespaces:
        for pid in _names("netns", "pids", ns):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
    removed = []
    for args in [
        *(("link", "del", n) for n in sorted(links, key=lambda n: n.endswith("br"))),
        *(("netns", "del", n) for n in reversed(namespaces)),
    ]:
        try:
            _ip(*args)
            removed.append(args[-1])
        except NetworkError as exc:  # a veth's peer goes with it; logged, not fatal
            log.info("leftover not removed step=%s error=%s", " ".join(args), exc)
    return removed


@dataclass
class PodSlot:
    """A pod's address on its node, and its namespace once `attach_pod` made it."""

    node: str
    address: str
    netns: str = ""
    reserved_s: float = field(default_factory=time.monotonic)


@dataclass
class NodeNetwork:
    """The namespaces, veths and bridges one sandbox made (and only those)."""

    tag: str
    isolated: bool
    subnet: str = ""
    addresses: dict[str, str] = field(default_factory=dict)  # node -> IP
    namespaces: dict[str, str] = field(default_factory=dict)  # node -> netns name
    bridge: str = ""
    veths: list[str] = field(default_factory=list)  # host ends
    pod_octets: dict[str, range] = field(default_factory=dict)  # node -> its pods' block
    pods: dict[str, PodSlot] = field(default_factory=dict)  # pod uid -> its slot
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def create(cls, nodes: Sequence[str], tag: str | None = None) -> NodeNetwork:
        """Namespaces for `nodes` as root, else loopback for all; what was made before
        a failure is torn down and NetworkError raised."""
        tag = tag or f"gfs{os.getpid() % 10000:04d}{random.randrange(100):02d}"
        if not can_isolate():
            return cls(tag, False, addresses={n: LOOPBACK for n in nodes})
        first, size = pod_blocks(len(nodes))
        net = cls(tag, True, subnet=_free_subnet())
        try:
            net._build(nodes, first, size)
        except NetworkError:
            net.teardown()
            raise
        return net

    def _build(self, nodes: Sequence[str], first: int, size: int) -> None:
        self.bridge = f"{self.tag}br"
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, node in enumerate(nodes):
            ns, host, peer = f"{self.tag}-{node}", f"{self.tag}h{i}", f"{self.tag}p{i}"
            address = f"{self.subnet}.{FIRST_HOST + i}"
            _ip("netns", "add", ns)
            self.namespaces[node] = ns
            _ip("link", "add", host, "type", "veth", "peer", "name", peer)
            self.veths.append(host)
            _ip("link", "set", host, "master", self.bridge)
            _ip("link", "set", host, "up")
            _ip("link", "set", peer, "netns", ns)
            _ip("-n", ns, "link", "set", peer, "name", "eth0")
            # A bridge takes the lowest MAC of its ports unless given one: fixed, so
            # that adding a pod's port never makes the node's address move.
            mac = f"02:00:{int(self.subnet.split('.')[-1]):02x}:00:{i >> 8:02x}:{i & 255:02x}"
            _ip("-n", ns, "link", "add", NODE_BRIDGE, "address", mac, "type", "bridge")
            _ip("-n", ns, "link", "set", "eth0", "master", NODE_BRIDGE)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", NODE_BRIDGE)
            for dev in ("eth0", NODE_BRIDGE, "lo"):
                _ip("-n", ns, "link", "set", dev, "up")
            self.addresses[node] = address
            self.pod_octets[node] = range(first + size * i, first + size * (i + 1))
            log.info("node network node=%s netns=%s ip=%s", node, ns, address)

    def address(self, node: str) -> str:
        return self.addresses.get(node, LOOPBACK)

    @property
    def host_address(self) -> str:
        """This machine's address as every node reaches it: the bridge's, else loopback."""
        return f"{self.subnet}.1" if self.isolated else LOOPBACK

    # -- pods ----------------------------------------------------------------------------

    def pod_address(self, node: str, uid: str) -> str:
        """The pod's address: reserved in its node's block on first call, the same
        after (loopback when not isolated). NetworkError if the block is full."""
        if not self.isolated:
            return self.address(node)
        with self._lock:
            slot = self.pods.get(uid)
            if slot is not None:
                return slot.address
            taken = {s.address for s in self.pods.values()}
            for octet in self.pod_octets.get(node, range(0)):
                address = f"{self.subnet}.{octet}"
                if address not in taken:
                    self.pods[uid] = PodSlot(node, address)
                    return address
        raise NetworkError(f"no free pod address on {node} (it has {len(taken)} in use)")

    def reserved_address(self, node: str, uid: str) -> str | None:
        """The pod's address if one is reserved (loopback when not isolated)."""
        if not self.isolated:
            return self.address(node)
        slot = self.pods.get(uid)
        return slot.address if slot is not None else None

    def attach_pod(self, node: str, uid: str) -> str:
        """Make the pod's namespace, its `eth0` on the node's bridge; its address.
        Once made, the same again; on a failure what was made is removed."""
        address = self.pod_address(node, uid)
        if not self.isolated:
            return address
        slot = self.pods[uid]
        if slot.netns:
            return address
        octet = address.rsplit(".", 1)[1]
        node_ns, ns, port = self.namespaces[node], f"{self.tag}-{node}-{octet}", f"v{octet}"
        try:
            _ip("netns", "add", ns)
            slot.netns = ns
            peer = ("peer", "name", "eth0", "netns", ns)  # made straight in the pod's
            _ip("-n", node_ns, "link", "add", port, "type", "veth", *peer)
            _ip("-n", node_ns, "link", "set", port, "master", NODE_BRIDGE)
            _ip("-n", node_ns, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        except NetworkError:
            self._remove_pod_netns(slot)
            raise
        log.info("pod network node=%s netns=%s ip=%s", node, ns, address)
        return address

    def exec_prefix(self, node: str, uid: str | None = None) -> list[str]:
        """What runs a command in the pod's namespace (`attach_pod` first), or the
        node's without a uid; nothing when not isolated."""
        slot = self.pods.get(uid) if uid is not None else None
        ns = slot.netns if slot is not None else self.namespaces.get(node)
        return ["ip", "netns", "exec", ns] if ns else []

    def pod_interface(self, uid: str) -> str | None:
        """The interface a pod's peers reach it on: `eth0` in its own namespace
        (`attach_pod` first), None when it shares the host's loopback."""
        slot = self.pods.get(uid)
        return "eth0" if slot is not None and slot.netns else None

    def reserved_on(self, node: str, before_s: float) -> list[str]:
        """The uids of the pods holding an address on `node` reserved before
        `before_s` (time.monotonic)."""
        with self._lock:
            return [
                uid
                for uid, slot in self.pods.items()
                if slot.node == node and slot.reserved_s < before_s
            ]

    def release_pod(self, uid: str) -> None:
        """Remove the pod's namespace and veth and free its address (no-op if none)."""
        with self._lock:
            slot = self.pods.pop(uid, None)
        if slot is not None:
            self._remove_pod_netns(slot)

    def _remove_pod_netns(self, slot: PodSlot) -> None:
        """Delete the node's end of the veth (at once, where deleting the namespace
        would remove it asynchronously), then the namespace; failures are logged."""
        if not slot.netns:
            return
        port, node_ns = f"v{slot.address.rsplit('.', 1)[1]}", self.namespaces.get(slot.node)
        steps = [("-n", node_ns, "link", "del", port)] if node_ns else []
        for args in [*steps, ("netns", "del", slot.netns)]:
            try:
                _ip(*args)
            except NetworkError as exc:
                log.warning("pod network teardown failed step=%s error=%s", " ".join(args), exc)
        slot.netns = ""

    def teardown(self) -> None:
        """Delete the pods' namespaces, the veth pairs, the nodes' namespaces and the
        bridge; each step is tried whatever the others did. (A namespace's own veth
        end would go with it, but only once the kernel has cleaned the namespace up,
        asynchronously.)"""
        for uid in list(self.pods):
            self.release_pod(uid)
        for host in self.veths:
            try:
                _ip("link", "del", host)
            except NetworkError as exc:
                log.warning("teardown failed veth=%s error=%s", host, exc)
        self.veths.clear()
        for node, ns in list(self.namespaces.items()):
            try:
                _ip("netns", "del", ns)
            except NetworkError as exc:
                log.warning("teardown failed node=%s error=%s", node, exc)
            del self.namespaces[node]
        if self.bridge:
            try:
                _ip("link", "del", self.bridge)
            except NetworkError as exc:
                log.warning("teardown failed bridge=%s error=%s", self.bridge, exc)
            self.bridge = ""
