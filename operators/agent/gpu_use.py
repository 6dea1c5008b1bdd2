"""Per-pod GPU use from NVML's per-process figures: what each pod's processes take of
the node's GPUs, for the policies' packing and the sharing model.

`run_agent` (operators/agent/main.py) calls `GpuUseMeter.read` with the pods bound to
its node at every publish (`--interval`, which is also the rate limit: one Node patch
per interval carries the figures in `gpuflow.dev/gpu-status`, beside each GPU's health).
Per GPU it reads:

- the running processes, compute and graphics (nvmlDeviceGetComputeRunningProcesses,
  nvmlDeviceGetGraphicsRunningProcesses): each process's pid and `usedGpuMemory`, in
  bytes (None where the driver cannot say, as pynvml returns NVML_VALUE_NOT_AVAILABLE);
- the utilisation samples newer than the last ones read on that GPU
  (nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp); CPU timestamps in
  microseconds): per sample a pid and `smUtil`, the process's SM utilisation in
  percent. The NVML API reference (nvmlDeviceGetProcessUtilization) returns "one
  utilization sample structure ... per process running, that had some non-zero
  utilization during the last sample period", and NVML_ERROR_NOT_FOUND (pynvml's
  NVMLError_NotFound) "if no valid sample entries are found since the
  lastSeenTimeStamp": a process without a sample ran no kernel, 0 %. A process's
  figure is the mean of its samples since the last read. Since a period in which it
  ran nothing leaves no sample, that is its utilisation while active, an upper bound
  of its mean over the interval (and so errs toward packing less); how far the two
  part for a real job has not been measured on a GPU. A GPU that keeps no samples
  (NVMLError_NotSupported) gives memory only.

A process belongs to the pod whose uid its cgroup names (`pod_uid_of_pid`: in
/proc/<pid>/cgroup, the kubelet's `pod<uid>` under kubepods, with cgroupfs or systemd
names); the DaemonSet runs with hostPID, so that the pids NVML reports (the host's) are
the agent's. The MPS server (`nvidia-cuda-mps-server`, by /proc/<pid>/comm), which
NVML lists on every GPU it serves, is no neighbour; but where it has utilisation samples
of its own the work of its clients is not attributed to them, so that GPU gives its
pods memory only. Other processes of no pod on this node (a process outside
Kubernetes, a pod of another node's namespace) count as neighbours on the GPU.

A pod's figure: `utilPct`, its mean over the GPUs it holds processes on of its
processes' summed mean `smUtil` there; `memMib`, its processes' memory on its fullest
GPU; `alone`, whether no other process was on any of those GPUs. A utilisation taken
beside others is the pod's share of a contended GPU, not its utilisation alone, which
is what the sharing model wants: the meter keeps each pod's last figure taken alone and
reports it as `aloneUtilPct` (for as long as the pod lives and the agent runs; an
agent restarted while its pods share GPUs forgets it).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.kube import Obj

MIB = 1024 * 1024
PROC = Path("/proc")
# The process name (/proc/<pid>/comm) of the MPS server that `nvidia-cuda-mps-control`
# starts for the GPUs it serves (NVIDIA's MPS documentation).
MPS_SERVER = "nvidia-cuda-mps-server"
# The kubelet's pod cgroup: `pod<uid>` in cgroupfs paths (kubepods/burstable/pod<uid>/
# <container>), `pod<uid with _ for ->.slice` in systemd ones
# (kubepods-burstable-pod<uid>.slice/cri-containerd-<container>.scope).
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


def is_mps_server(pid: int, proc: Path = PROC) -> bool:
    """Whether process `pid` is an MPS server (False for one gone already)."""
    try:
        return (proc / str(pid) / "comm").read_text(encoding="utf-8").strip() == MPS_SERVER
    except OSError:
        return False


def pod_uid_of_pid(pid: int, proc: Path = PROC) -> str | None:
    """The uid of the pod whose cgroup holds process `pid`, None for a process of no
    pod (or one gone already)."""
    try:
        text = (proc / str(pid) / "cgroup").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        # hierarchy-ID:controllers:path; the path is the third field
        path = line.split(":", 2)[-1]
        if "kubepods" in path:
            match = _POD_UID.search(path)
            if match:
                return match[1].replace("_", "-")
    return None


@dataclass
class _OnGpu:
    """One pod's processes on one GPU."""

    util_pct: float = 0.0
    mem_bytes: int = 0


class GpuUseMeter:
    """Reads per-process use from NVML and sums it per pod; keeps, between reads, the
    last sample timestamp per GPU and each pod's last utilisation measured alone."""

    def __init__(self, nvml: Any, proc: Path = PROC):
        self.nvml = nvml
        self.proc = proc
        self._seen_us: dict[int, int] = {}  # GPU index -> newest sample timestamp read
        self._alone_pct: dict[str, int] = {}  # pod key -> its last utilisation alone

    def read(self, pods: Iterable[Obj]) -> dict[str, dict[str, Any]]:
        """Pod key ("namespace/name") -> {"utilPct", "memMib", "alone", and
        "aloneUtilPct" where known} for each pod with processes on the node's GPUs;
        "utilPct" is left out where no GPU of the pod keeps samples."""
        key_of_uid = {
            str(p["metadata"]["uid"]): f"{p['metadata'].get('namespace') or ''}/"
            f"{p['metadata']['name']}"
            for p in pods
            if p["metadata"].get("uid")
        }
        nvml = self.nvml
        use: dict[str, dict[int, _OnGpu]] = defaultdict(dict)
        shared: set[str] = set()
        no_samples: set[str] = set()
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            procs = self._processes(handle)
            if not procs:
                continue
            util = self._utilisation(i, handle)
            servers = {pid for pid in procs if is_mps_server(pid, self.proc)}
            if util is not None and any(util.get(pid, 0.0) > 0.0 for pid in servers):
                util = None  # the clients' kernels are counted as the server's
            owners: set[str | None] = set()
            for pid, mem in procs.items():
                if pid in servers:
                    continue
                key = key_of_uid.get(pod_uid_of_pid(pid, self.proc) or "")
                owners.add(key)
                if key is None:
                    continue
                on = use[key].setdefault(i, _OnGpu())
                on.mem_bytes += mem
                if util is None:
                    no_samples.add(key)
                else:
                    on.util_pct += util.get(pid, 0.0)
            if len(owners) > 1:
                shared.update(k for k in owners if k is not None)
        out: dict[str, dict[str, Any]] = {}
        for key, gpus in sorted(use.items()):
            figure: dict[str, Any] = {
                "memMib": max(g.mem_bytes for g in gpus.values()) // MIB,
                "alone": key not in shared,
            }
            if key not in no_samples:
                pct = round(sum(min(100.0, g.util_pct) for g in gpus.values()) / len(gpus))
                figure["utilPct"] = pct
                if key not in shared:
                    self._alone_pct[key] = pct
            if key in self._alone_pct:
                figure["aloneUtilPct"] = self._alone_pct[key]
            out[key] = figure
        for key in set(self._alone_pct) - set(key_of_uid.values()):
            del self._alone_pct[key]  # the pod is gone from the node
        return out

    def _processes(self, handle: Any) -> dict[int, int]:
        """pid -> GPU memory in bytes (0 where the driver cannot say) of the compute
        and graphics processes on the GPU; none where NVML cannot list them."""
        nvml = self.nvml
        out: dict[int, int] = {}
        for read in (
            nvml.nvmlDeviceGetComputeRunningProcesses,
            nvml.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            try:
                procs = read(handle)
            except nvml.NVMLError:
                continue
            for p in procs:
                # A process that is both (a CUDA-OpenGL one) is listed twice with its
                # one memory figure: count it once.
                out[int(p.pid)] = max(out.get(int(p.pid), 0), int(p.usedGpuMemory or 0))
        return out

    def _utilisation(self, index: int, handle: Any) -> dict[int, float] | None:
        """pid -> its mean `smUtil` over the samples newer than the last read on this
        GPU ({} when there are none); None when the GPU keeps no samples."""
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._seen_us.get(index, 0))
        except nvml.NVMLError_NotFound:
            return {}
        except nvml.NVMLError:
            return None
        sums: dict[int, list[float]] = defaultdict(list)
        for s in samples:
            sums[int(s.pid)].append(float(s.smUtil))
            self._seen_us[index] = max(self._seen_us.get(index, 0), int(s.timeStamp))
        return {pid: sum(v) / len(v) for pid, v in sums.items()}
