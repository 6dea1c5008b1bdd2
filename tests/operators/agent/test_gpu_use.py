"""Per-pod GPU use (operators/agent/gpu_use.py): NVML's per-process figures (the fake,
tests/operators/fake_nvml.py) summed per pod, the pod found from the process's cgroup
as /proc/<pid>/cgroup holds it under the kubelet (written to a directory here)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from operators.agent.gpu_use import GpuUseMeter, pod_uid_of_pid
from tests.operators.fake_nvml import FakeNvml

MIB = 1024 * 1024
UID_A = "0d7f2a5c-1b2c-4d3e-8f90-a1b2c3d4e5f6"
UID_B = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
# cgroup v1 with the cgroupfs driver (several hierarchies), and cgroup v2 with the
# systemd driver (one line; the uid's dashes become underscores in the slice name).
CGROUPS = {
    101: f"12:memory:/kubepods/burstable/pod{UID_A}/4f1c0e\n11:cpu,cpuacct:/kubepods/"
    f"burstable/pod{UID_A}/4f1c0e\n",
    202: "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
    f"{UID_B.replace('-', '_')}.slice/cri-containerd-77aa.scope\n",
    303: "0::/system.slice/nvidia-mps.service\n",  # the MPS server: no pod
    404: "0::/user.slice/user-1000.slice/session-3.scope\n",  # a process of no pod
}
COMM = {101: "python3", 202: "python3", 303: "nvidia-cuda-mps-server", 404: "python3"}
PODS = [
    {"metadata": {"namespace": "ml", "name": "a-worker-0", "uid": UID_A}},
    {"metadata": {"namespace": "ml", "name": "b-worker-0", "uid": UID_B}},
]


def proc_dir(tmp_path: Path) -> Path:
    for pid, text in CGROUPS.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text, encoding="utf-8")
        (tmp_path / str(pid) / "comm").write_text(COMM[pid] + "\n", encoding="utf-8")
    return tmp_path


def meter(tmp_path: Path, **kwargs: Any) -> tuple[FakeNvml, GpuUseMeter]:
    nvml = FakeNvml(**kwargs)
    nvml.nvmlInit()
    return nvml, GpuUseMeter(nvml, proc_dir(tmp_path))


def test_pods_are_found_by_their_cgroup() -> None:
    assert pod_uid_of_pid(os.getpid()) is None  # this test's own process: no pod
    assert pod_uid_of_pid(2**22 + 7) is None  # no such process


def test_each_pods_processes_are_summed_per_gpu_and_averaged_over_its_gpus(
    tmp_path: Path,
) -> None:
    nvml, gpu_use = meter(tmp_path)
    # Pod a: one process on GPU 0 launching small kernels (the example MLP's 6 %).
    nvml.run(0, 101, 900 * MIB, ((1_000_000, 5), (1_166_000, 7), (1_333_000, 6)))
    # Pod b: one process on each of GPUs 1 and 2, 80 % and 60 % busy.
    nvml.run(1, 202, 2000 * MIB, ((1_000_000, 80),))
    nvml.run(2, 202, 3000 * MIB, ((1_000_000, 60),))
    # A process of no pod alone on GPU 3.
    nvml.run(3, 404, 30 * MIB, ((1_000_000, 90),))
    assert gpu_use.read(PODS) == {
        "ml/a-worker-0": {"memMib": 900, "alone": True, "utilPct": 6, "aloneUtilPct": 6},
        "ml/b-worker-0": {"memMib": 3000, "alone": True, "utilPct": 70, "aloneUtilPct": 70},
    }


def test_only_samples_newer_than_the_last_read_count(tmp_path: Path) -> None:
    nvml, gpu_use = meter(tmp_path)
    nvml.run(0, 101, 900 * MIB, ((1_000_000, 50),))
    assert gpu_use.read(PODS)["ml/a-worker-0"]["utilPct"] == 50
    # No sample since: NVML says NotFound, the GPU ran none of its kernels.
    assert gpu_use.read(PODS)["ml/a-worker-0"]["utilPct"] == 0
    nvml.sample(0, 101, ((2_000_000, 20),))
    assert gpu_use.read(PODS)["ml/a-worker-0"]["utilPct"] == 20


def test_a_pod_beside_another_process_keeps_its_utilisation_alone(tmp_path: Path) -> None:
    nvml, gpu_use = meter(tmp_path)
    nvml.run(0, 101, 900 * MIB, ((1_000_000, 40),))
    gpu_use.read(PODS)
    # Pod b's process joins GPU 0: both are now measured beside each other.
    nvml.run(0, 202, 1000 * MIB, ((2_000_000, 30),))
    nvml.sample(0, 101, ((2_000_000, 25),))
    figures = gpu_use.read(PODS)
    assert figures["ml/a-worker-0"] == {
        "memMib": 900,
        "alone": False,
        "utilPct": 25,
        "aloneUtilPct": 40,
    }
    assert figures["ml/b-worker-0"] == {"memMib": 1000, "alone": False, "utilPct": 30}
    # A pod gone from the node is forgotten.
    assert gpu_use.read(PODS[1:])["ml/b-worker-0"]["alone"] is False
    assert "ml/a-worker-0" not in gpu_use.read(PODS[1:])


def test_a_gpu_without_process_samples_gives_memory_only(tmp_path: Path) -> None:
    nvml, gpu_use = meter(tmp_path, process_samples=False)
    nvml.run(0, 101, None, graphics=True)  # memory NVML cannot say (WDDM): None
    nvml.run(1, 101, 700 * MIB)
    assert gpu_use.read(PODS) == {"ml/a-worker-0": {"memMib": 700, "alone": True}}


def test_the_mps_server_is_no_neighbour_unless_it_takes_its_clients_samples(
    tmp_path: Path,
) -> None:
    nvml, gpu_use = meter(tmp_path)
    # MPS on GPU 0: the server holds memory; the client's samples are its own.
    nvml.run(0, 303, 30 * MIB)
    nvml.run(0, 101, 900 * MIB, ((1_000_000, 40),))
    assert gpu_use.read(PODS)["ml/a-worker-0"] == {
        "memMib": 900,
        "alone": True,
        "utilPct": 40,
        "aloneUtilPct": 40,
    }
    # The server shows the samples: who of its clients ran is unknown, memory only.
    nvml.sample(0, 303, ((2_000_000, 55),))
    assert gpu_use.read(PODS)["ml/a-worker-0"] == {
        "memMib": 900,
        "alone": True,
        "aloneUtilPct": 40,
    }


def test_a_process_of_no_pod_is_a_neighbour(tmp_path: Path) -> None:
    nvml, gpu_use = meter(tmp_path)
    nvml.run(0, 101, 900 * MIB, ((1_000_000, 40),))
    nvml.run(0, 404, 100 * MIB, ((1_000_000, 50),))
    assert gpu_use.read(PODS)["ml/a-worker-0"]["alone"] is False
