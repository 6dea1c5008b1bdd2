"""A sandbox killed with SIGKILL leaves nothing behind (gpuflow/sandbox/remains.py,
reaper.py): its reaper removes its processes, namespaces and links at once, and a
dead sandbox whose reaper died too is cleaned by the next sandbox's `clean_dead`.

Counted before and after: the sandbox's process tree (servers, pods and the pods'
own children, by pid and start time), `ip netns list` entries and links carrying the
sandbox's id. Each test keeps its records in a registry folder of its own
(GPUFLOW_SANDBOX_REGISTRY), so it never touches another sandbox of this machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuflow.sandbox.network import can_isolate
from gpuflow.sandbox.remains import REGISTRY_ENV, clean_dead, running, start_time
from operators.kube import KubeApi, api_client
from tests.controlplane.fixtures import NEEDS_CONTROL_PLANE
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
GPUFLOW = [sys.executable, "-m", "gpuflow.cli"]
# A worker that starts a child of its own (as a data loader would), then waits.
WORKER = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "time.sleep(300)\n"
)
GONE_WITHIN_S = 10.0  # measured: about 1 s (the reaper's start, the processes' SIGTERM)


def tree(root: int) -> set[tuple[int, int]]:
    """(pid, start time) of `root` and every descendant now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        start = start_time(pid)
        if start is not None:
            found.add((pid, start))
            todo.extend(children.get(pid, []))
    return found


def network_of(sandbox_id: str) -> list[str]:
    """The namespaces and links named after the sandbox."""
    if not can_isolate():
        return []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in netns.splitlines() if line.strip()]
    names += [line.split(": ")[1].split("@")[0] for line in links.splitlines()]
    return [n for n in names if n.startswith(sandbox_id)]


def record(registry: Path) -> dict[str, Any]:
    """The one sandbox record in `registry` (remains.py's JSON)."""
    records = list(registry.glob("*.json"))
    assert len(records) == 1, records
    loaded: dict[str, Any] = json.loads(records[0].read_text())
    return loaded


def dljob(name: str, gpus: int) -> dict[str, object]:
    spec = {"image": "ignored", "command": ["python", "-c", WORKER], "gpus": gpus}
    return {
        "apiVersion": "gpuflow.dev/v1alpha1",
        "kind": "DLJob",
        "metadata": {"name": name},
        "spec": spec,
    }


@NEEDS_CONTROL_PLANE
def test_a_sandbox_killed_with_sigkill_leaves_nothing_behind(tmp_path: Path) -> None:
    registry, directory = tmp_path / "registry", tmp_path / "sandbox"
    env = {**os.environ, REGISTRY_ENV: str(registry)}
    argv = [*GPUFLOW, "sandbox", "up", "--nodes", "2x1", "--dir", str(directory)]
    log = (tmp_path / "up.log").open("wb")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, cwd=ROOT, env=env)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline().decode()  # printed once everything is up
        assert banner.startswith("sandbox up:"), (tmp_path / "up.log").read_text()[-2000:]
        client = api_client(str(directory / "kubeconfig"))
        try:
            KubeApi(client).create_dljob("default", dljob("spread", 2))  # a pod on each node
        finally:
            client.close()

        def pods_and_children() -> bool:
            pods = [p for p in record(registry)["processes"] if p["name"].startswith("pod ")]
            return len(pods) == 2 and all(len(tree(p["pid"])) == 2 for p in pods)

        wait_for("both pods and their children", pods_and_children, timeout_s=60)
        sandbox_id = str(record(registry)["id"])
        before = tree(proc.pid)
        network_before = network_of(sandbox_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at = time.monotonic()

        def nothing_left() -> bool:
            return not any(running(*p) for p in before) and not network_of(sandbox_id)

        wait_for("nothing left", nothing_left, timeout_s=GONE_WITHIN_S)
        took_s = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        log.close()
    # The sandbox itself, etcd, kube-apiserver, kube-controller-manager, the service,
    # the reaper, two pods and their two children, at least.
    assert len(before) >= 10, before
    if can_isolate():  # 2 nodes' and 2 pods' namespaces, 2 veths, the bridge
        assert len(network_before) >= 7, network_before
    assert not list(registry.glob("*.json")) and not list(registry.glob("*.lock"))
    reaper_log = (directory / "reaper.log").read_text()
    assert f"cleaned a dead sandbox id={sandbox_id}" in reaper_log
    print(f"processes={len(before)} network={len(network_before)} gone in {took_s:.2f} s")


STARTER = """
import sys, time
from pathlib import Path
from gpuflow.sandbox.network import NodeNetwork
from gpuflow.sandbox.processes import start_process
from gpuflow.sandbox.remains import Remains
remains = Remains.open(Path(sys.argv[1]), temporary=False)
NodeNetwork.create(["node-0", "node-1"], tag=remains.id)
cmd = [sys.executable, "-c", sys.argv[2]]
start_process(cmd, Path(sys.argv[1]) / "worker.log", on_start=remains.add)
print(remains.id, flush=True)
time.sleep(300)
"""


def test_a_dead_sandbox_without_its_reaper_is_cleaned_by_the_next(tmp_path: Path) -> None:
    """A sandbox process and its reaper both killed (a kill of everything): what it
    made stays until a sandbox starts again and calls clean_dead, which removes it."""
    registry = tmp_path / "registry"
    env = {**os.environ, REGISTRY_ENV: str(registry)}
    argv = [sys.executable, "-c", STARTER, str(tmp_path), WORKER]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=ROOT, env=env)
    try:
        assert proc.stdout is not None
        sandbox_id = proc.stdout.readline().decode().strip()
        worker = record(registry)["processes"][0]
        wait_for("the worker's child", lambda: len(tree(worker["pid"])) == 2, timeout_s=10)
        made = tree(worker["pid"])
        network = network_of(sandbox_id)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert all(running(*p) for p in made)  # left behind: no reaper ran
    assert len(network) == (5 if can_isolate() else 0), network  # 2 netns, 2 veths, bridge
    assert clean_dead(registry) == [sandbox_id]
    assert not any(running(*p) for p in made)
    assert network_of(sandbox_id) == []
    assert not list(registry.iterdir())
    assert clean_dead(registry) == []  # nothing more


@pytest.mark.skipif(not can_isolate(), reason="namespaces need root and iproute2")
def test_a_living_sandbox_is_never_cleaned(tmp_path: Path) -> None:
    """Its lock is held: clean_dead leaves its record and its network alone."""
    from gpuflow.sandbox.network import NodeNetwork
    from gpuflow.sandbox.remains import Remains

    registry = tmp_path / "registry"
    remains = Remains.open(tmp_path, temporary=False, folder=registry)
    net = NodeNetwork.create(["node-0"], tag=remains.id)
    try:
        assert clean_dead(registry) == []
        assert len(network_of(remains.id)) == 3  # namespace, veth, bridge
    finally:
        net.teardown()
        remains.close()
    assert not list(registry.iterdir())


@pytest.mark.skipif(not can_isolate(), reason="namespaces need root and iproute2")
def test_a_sandbox_dead_before_its_record_was_written_still_loses_its_network(
    tmp_path: Path,
) -> None:
    """Only the lock file exists (the sandbox died between taking its id and writing
    the record): the namespaces and links named after the id are still removed, and
    a process inside one of them, which no record names, is killed first."""
    from gpuflow.sandbox.network import NodeNetwork

    registry = tmp_path / "registry"
    registry.mkdir()
    sandbox_id = f"gfs{os.getpid() % 10000:04d}99"
    (registry / f"{sandbox_id}.lock").touch()
    net = NodeNetwork.create(["node-0"], tag=sandbox_id)
    inside = subprocess.Popen([*net.exec_prefix("node-0"), "sleep", "300"], start_new_session=True)
    try:
        assert len(network_of(sandbox_id)) == 3
        assert clean_dead(registry) == [sandbox_id]
        assert inside.wait(timeout=5) == -signal.SIGKILL
    finally:
        if inside.poll() is None:
            inside.kill()
            inside.wait()
    assert network_of(sandbox_id) == []
    assert not list(registry.iterdir())
