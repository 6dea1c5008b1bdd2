"""Real links for the agent's tests: network namespaces, a veth pair, iperf3.

`link` (tests/operators/agent/conftest.py) builds two namespaces joined by a veth
pair: the client end carries the pod addresses POD_IP and is the device to shape;
the server end runs one-off iperf3 servers at SERVER_IP. All traffic stays in
10.203.0.0/24 inside them; they are deleted afterwards, also on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass

import pytest

TOLERANCE = 0.15  # the bound on |measured - assigned| / assigned

MISSING = [tool for tool in ("ip", "tc", "iperf3") if shutil.which(tool) is None]
NETNS_REASON = (
    "needs root" if os.geteuid() != 0 else f"needs {', '.join(MISSING)} on PATH" if MISSING else ""
)
needs_netns = pytest.mark.skipif(bool(NETNS_REASON), reason=NETNS_REASON or "runs")

SERVER_IP = "10.203.0.1"
POD_IP = {"pod-a": "10.203.0.11", "pod-b": "10.203.0.12"}
LINK_RATE_GBPS = 10.0  # what the default class may reach; above any rate we assign
IPERF_TIMEOUT_S = 15  # every iperf3 process is killed after this, whatever happens


@dataclass(frozen=True)
class Link:
    client_ns: str
    server_ns: str
    client_dev: str
    leaf_qdisc: str | None


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=10).stdout


def leaf_qdisc(ns: str, dev: str) -> str | None:
    """fq_codel where the kernel has it; HTB's default pfifo leaf otherwise."""
    probe = subprocess.run(["tc", "-netns", ns, "qdisc", "add", "dev", dev, "root", "fq_codel"],
                           capture_output=True, timeout=10)  # fmt: skip
    if probe.returncode != 0:
        return None
    sh("tc", "-netns", ns, "qdisc", "del", "dev", dev, "root")
    return "fq_codel"


class Iperf:
    """One iperf3 test: a one-off server in the server netns, a client bound to a pod IP."""

    def __init__(self, link: Link, src_ip: str, port: int, duration_s: float, interval_s: float):
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", link.server_ns,
             "iperf3", "-s", "-1", "-J", "-i", str(interval_s), "-B", SERVER_IP, "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.client: subprocess.Popen[str] | None = None
        try:
            self._wait_listening(link.server_ns, port)
            self.client = subprocess.Popen(
                ["ip", "netns", "exec", link.client_ns,
                 "iperf3", "-c", SERVER_IP, "-p", str(port), "-B", src_ip,
                 "-t", str(duration_s), "-i", str(interval_s), "-J", "--get-server-output"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _wait_listening(ns: str, port: int) -> None:
        for _ in range(100):  # 100 x 20 ms
            if sh("ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}").strip():
                return
            time.sleep(0.02)
        raise TimeoutError(f"iperf3 server on port {port} did not start")

    def result(self) -> dict[str, object]:
        assert self.client is not None
        try:
            out, _ = self.client.communicate(timeout=IPERF_TIMEOUT_S)
        finally:
            self.close()
        report: dict[str, object] = json.loads(out)
        assert "error" not in report, report["error"]
        return report

    def __enter__(self) -> Iperf:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for proc in (self.client, self.server):
            if proc is not None and proc.poll() is None:
                try:
                    proc.wait(timeout=IPERF_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def received_gbps(report: dict[str, object]) -> float:
    end = report["end"]
    assert isinstance(end, dict)
    return float(end["sum_received"]["bits_per_second"]) / 1e9


def server_intervals(report: dict[str, object]) -> list[tuple[float, float, float]]:
    """(start_s, end_s, Gbit/s received) for each interval the server measured."""
    server = report["server_output_json"]
    assert isinstance(server, dict)
    return [
        (float(s["start"]), float(s["end"]), float(s["bits_per_second"]) / 1e9)
        for s in (i["sum"] for i in server["intervals"])
    ]


def assert_within(measured: float, assigned: float, what: str) -> None:
    error = abs(measured - assigned) / assigned
    assert error <= TOLERANCE, f"{what}: measured {measured:.4f} vs assigned {assigned} Gbit/s"
