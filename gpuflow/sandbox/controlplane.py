"""A real Kubernetes control plane on one machine: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler as subprocesses, from the binaries
controlplane/build.sh builds.

`ControlPlane(directory).start()` runs the four on 127.0.0.1 and free ports with
everything under `directory`: the store's data, a service-account key pair (the API
server issues pods' tokens through the TokenRequest API with it), the static tokens
of the admin (group system:masters), of the controller manager and of the scheduler,
a CA and the API server's serving certificate signed by it (pki/), the kubeconfigs and
one log per process. `ControlPlaneOptions` adds a static token and a kubeconfig for
each named node (user `system:node:<name>` in group `system:nodes`, which the Node
authorizer and the NodeRestriction admission plugin confine to its own Node, Lease and
pods), the node lifecycle controller's periods, and `pod_address`: an address of this
machine that pods in network namespaces reach the API server at (it then listens on
all addresses, and its certificate names that one too). The scheduler binds the pods
the controller manager creates (a Deployment's, a DaemonSet's); its NodeResourcesFit
plugin is off because the emulated nodes claim no CPU or memory (heartbeat.py). start()
returns once the API server's /readyz answers and the controller manager has made the
`default` ServiceAccount of namespace `default` (the ServiceAccount admission plugin
refuses pods before then); stop() ends them in the reverse order.
gpuflow/sandbox/cluster.py (the sandbox) and tests/controlplane drive it;
docs/controlplane.md says what is built and why.
"""

from __future__ import annotations

import csv
import datetime
import functools
import ipaddress
import os
import re
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from gpuflow.sandbox.kubelet.pki import write_kubelet_client
from gpuflow.sandbox.processes import ProcessHook, log_tail, start_process, stop_process
from gpuflow.sandbox.service import free_port

BIN_ENV = "GPUFLOW_CONTROLPLANE_BIN"  # overrides where the binaries are looked for
# Where controlplane/build.sh puts them: .cache/controlplane/bin at the repository root.
DEFAULT_BIN_DIR = Path(__file__).resolve().parents[2] / ".cache" / "controlplane" / "bin"
BUILD_HINT = "build them with `make controlplane` (bash controlplane/build.sh)"

HOST = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"  # kubeadm's default service subnet
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's: the CIDR's first address
# The names kubeadm puts in the API server's certificate beside its addresses.
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
CERT_DAYS = 365  # kubeadm's serving certificates last a year
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"  # kubeadm's default issuer
ADMIN_USER = "admin"
ADMIN_GROUP = "system:masters"  # bound to cluster-admin by the bootstrap RBAC policy
# The user the bootstrap RBAC policy binds the system:kube-controller-manager role to.
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
# The user the bootstrap policy binds system:kube-scheduler and system:volume-scheduler to.
SCHEDULER_USER = "system:kube-scheduler"
# A kubelet's user and group as the Node authorizer recognises them (node_authorizer.go).
NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
SA_KEY_BITS = 2048  # RSA size kubeadm generates for sa.key
START_TIMEOUT_S = 180.0  # a cold API server on a busy 2-core machine is ready in ~20 s
STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL: all three shut down in about a second
POLL_S = 0.2


class ControlPlaneError(RuntimeError):
    """A process exited or was not ready in time; the message ends with its log's tail."""


class BinariesMissing(ControlPlaneError):
    """The binaries are not built; the message says how to build them."""


@dataclass(frozen=True)
class Binaries:
    """The folder holding etcd, kube-apiserver, kube-controller-manager and
    kube-scheduler."""

    directory: Path

    NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

    @classmethod
    def find(cls, directory: Path | None = None) -> Binaries:
        """The binaries in `directory`, else $GPUFLOW_CONTROLPLANE_BIN, else build.sh's
        folder; BinariesMissing naming the first one absent and how to build them."""
        env = os.environ.get(BIN_ENV)
        found = cls(directory or (Path(env) if env else DEFAULT_BIN_DIR))
        for name in cls.NAMES:
            if not os.access(found.directory / name, os.X_OK):
                raise BinariesMissing(f"no {name} in {found.directory}: {BUILD_HINT}")
        return found

    @property
    def etcd(self) -> Path:
        return self.directory / "etcd"

    @property
    def kube_apiserver(self) -> Path:
        return self.directory / "kube-apiserver"

    @property
    def kube_controller_manager(self) -> Path:
        return self.directory / "kube-controller-manager"

    @property
    def kube_scheduler(self) -> Path:
        return self.directory / "kube-scheduler"

    @functools.cached_property
    def kubernetes_version(self) -> str:
        """The release the Kubernetes binaries were built from, as "v1.34.4"."""
        return _version_of([str(self.kube_apiserver), "--version"], r"Kubernetes (v\S+)")

    @functools.cached_property
    def etcd_version(self) -> str:
        """etcd's release, as "3.6.4"."""
        return _version_of([str(self.etcd), "--version"], r"etcd Version: (\S+)")


def _version_of(cmd: Sequence[str], pattern: str) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout
    found = re.search(pattern, out)
    if found is None:
        raise ControlPlaneError(f"`{' '.join(cmd)}` printed no version: {out.strip()!r}")
    return found.group(1)


@dataclass
class _Process:
    """One control-plane process and its log."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls, name: str, cmd: Sequence[str], directory: Path, on_start: ProcessHook | None
    ) -> _Process:
        log_path = directory / f"{name}.log"
        return cls(name, start_process(cmd, log_path, on_start=on_start), log_path)

    def check_running(self) -> None:
        if self.process.poll() is not None:
            raise ControlPlaneError(f"{self.name} exited ({self.process.returncode}){self.tail()}")

    def stop(self, grace_s: float) -> None:
        stop_process(self.process, grace_s)

    def tail(self) -> str:
        return log_tail(self.log_path)


@dataclass(frozen=True)
class ControlPlaneOptions:
    """What a control plane is started with beyond its defaults."""

    # Nodes whose kubelets get their own credentials (ControlPlane.node_kubeconfig).
    nodes: tuple[str, ...] = ()
    port: int = 0  # the API server's; 0: a free one
    # The node lifecycle controller's --node-monitor-period and
    # --node-monitor-grace-period; None keeps kube-controller-manager's defaults (5 s,
    # 50 s): a test that stops a kubelet's heartbeats passes shorter ones.
    node_monitor_period_s: float | None = None
    node_monitor_grace_period_s: float | None = None
    # An address of this machine (the sandbox bridge's) where pods in network
    # namespaces reach the API server; None: 127.0.0.1 only.
    pod_address: str | None = None


@dataclass(frozen=True)
class _Credentials:
    """What the API server and the controller manager authenticate with."""

    sa_key: Path  # signs service-account tokens (API server, controller manager)
    sa_pub: Path  # verifies them (API server)
    token_file: Path  # --token-auth-file
    admin_token: str
    controller_manager_token: str
    scheduler_token: str
    node_tokens: dict[str, str]  # node name -> its kubelet's token

    @classmethod
    def write(cls, directory: Path, nodes: Sequence[str]) -> _Credentials:
        key = rsa.generate_private_key(public_exponent=65537, key_size=SA_KEY_BITS)
        sa_key = directory / "sa.key"
        _write_key(sa_key, key)
        sa_pub = directory / "sa.pub"
        sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        admin, controller_manager, scheduler = (secrets.token_hex(16) for _ in range(3))
        node_tokens = {node: secrets.token_hex(16) for node in nodes}
        token_file = directory / "tokens.csv"
        with token_file.open("w", newline="") as f:
            # token,user,uid,"group,..." as kube-apiserver's --token-auth-file reads it
            rows = csv.writer(f)
            rows.writerow([admin, ADMIN_USER, ADMIN_USER, ADMIN_GROUP])
            rows.writerow([controller_manager, CONTROLLER_MANAGER_USER, CONTROLLER_MANAGER_USER])
            rows.writerow([scheduler, SCHEDULER_USER, SCHEDULER_USER])
            for node, token in node_tokens.items():
                user = NODE_USER_PREFIX + node
                rows.writerow([token, user, user, NODES_GROUP])
        token_file.chmod(0o600)
        return cls(sa_key, sa_pub, token_file, admin, controller_manager, scheduler, node_tokens)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def write_serving_pki(directory: Path, addresses: Sequence[str]) -> tuple[Path, Path, Path]:
    """A CA and the API server's serving certificate signed by it, as kubeadm lays
    them out (ca.crt, apiserver.crt, apiserver.key in `directory`): valid for
    `addresses`, the `kubernetes` Service's IP and APISERVER_DNS_NAMES. The CA is what
    clients trust and what the controller manager publishes to every namespace as
    ConfigMap kube-root-ca.crt (a pod's ca.crt)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=SA_KEY_BITS)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuflow-sandbox-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=SA_KEY_BITS)
    ips = dict.fromkeys([*addresses, KUBERNETES_SERVICE_IP])
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in APISERVER_DNS_NAMES]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = (
        directory / "ca.crt",
        directory / "apiserver.crt",
        directory / "apiserver.key",
    )
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(directory / "ca.key", ca_key)  # signs the kubelets' certificates (kubelet_pki)
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_file, key)
    return ca_file, cert_file, key_file


def write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, token: str) -> Path:
    """A kubeconfig for `user` with a bearer `token` on `server`, trusting `ca_file`."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": user,
        "clusters": [
            {
                "name": "gpuflow",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": user,
                "context": {"cluster": "gpuflow", "user": user, "namespace": "default"},
            }
        ],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager under one directory."""

    def __init__(
        self,
        directory: Path,
        binaries: Binaries | None = None,
        options: ControlPlaneOptions | None = None,
        on_start: ProcessHook | None = None,
    ) -> None:
        self.directory = directory
        self.binaries = binaries or Binaries.find()
        self.options = options or ControlPlaneOptions()
        self.on_start = on_start  # told each process started (the sandbox records them)
        self.etcd_url = ""  # http://127.0.0.1:<port>, once started
        self.url = ""  # https://127.0.0.1:<port>: the API server, once started
        self._processes: list[_Process] = []

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (group system:masters), written by start()."""
        return self.directory / "admin.kubeconfig"

    def node_kubeconfig(self, node: str) -> Path:
        """The kubeconfig of `node`'s kubelet (one of options.nodes), written by start()."""
        if node not in self.options.nodes:
            raise KeyError(f"no credentials for node {node!r}: not in ControlPlaneOptions.nodes")
        return self.directory / "nodes" / f"{node}.kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the API server's serving certificate (write_serving_pki)."""
        return self.directory / "pki" / "ca.crt"

    @property
    def port(self) -> int:
        """The API server's port, once started."""
        return int(self.url.rsplit(":", 1)[1])

    @property
    def pids(self) -> dict[str, int]:
        """The process id of each process started, by name ("kube-apiserver")."""
        return {p.name: p.process.pid for p in self._processes}

    @property
    def version(self) -> str:
        """The Kubernetes release, as "v1.34.4" (what /version's gitVersion says)."""
        return self.binaries.kubernetes_version

    @property
    def store(self) -> str:
        """The store and its release, as "etcd 3.6.4"."""
        return f"etcd {self.binaries.etcd_version}"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the three and return once the control plane serves; on any failure stop
        what started and raise ControlPlaneError."""
        deadline = time.monotonic() + timeout_s
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            credentials = _Credentials.write(self.directory, self.options.nodes)
            self._start_etcd(deadline)
            self._start_apiserver(credentials, deadline)
            write_kubeconfig(
                self.kubeconfig, self.url, self.ca_file, ADMIN_USER, credentials.admin_token
            )
            self._write_node_kubeconfigs(credentials)
            self._start_controller_manager(credentials, deadline)
            self._start_scheduler(credentials)
        except BaseException:
            self.stop()
            raise

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the processes, newest first (the store last): SIGTERM, SIGKILL after
        `grace_s` each. kube-apiserver waits for its open watches to end before it exits:
        a caller whose clients may still be watching, and whose store is thrown away,
        passes a short grace."""
        while self._processes:
            self._processes.pop().stop(grace_s)

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _write_node_kubeconfigs(self, credentials: _Credentials) -> None:
        for node, token in credentials.node_tokens.items():
            path = self.node_kubeconfig(node)
            path.parent.mkdir(exist_ok=True)
            write_kubeconfig(path, self.url, self.ca_file, NODE_USER_PREFIX + node, token)

    def _start_etcd(self, deadline: float) -> None:
        client, peer = (f"http://{HOST}:{free_port(HOST)}" for _ in range(2))
        cmd = [
            str(self.binaries.etcd),
            "--name=gpuflow",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=gpuflow={peer}",
            # The data lives as long as the directory, a test's or a sandbox's: no
            # fsync makes every write several times faster and loses nothing that matters.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]
        self.etcd_url = client
        etcd = self._run("etcd", cmd)
        health = urllib.request.Request(f"{client}/health")
        self._wait("etcd to answer /health", lambda: _answers(health, None), [etcd], deadline)

    def _start_apiserver(self, credentials: _Credentials, deadline: float) -> None:
        port = self.options.port or free_port(HOST)
        pod_address = self.options.pod_address
        addresses = [HOST, pod_address] if pod_address else [HOST]
        ca_file, cert_file, key_file = write_serving_pki(self.ca_file.parent, addresses)
        kubelet_cert, kubelet_key = write_kubelet_client(self.ca_file.parent)
        cmd = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            # All addresses when pods in network namespaces reach it at pod_address.
            f"--bind-address={'0.0.0.0' if pod_address else HOST}",
            f"--advertise-address={pod_address or HOST}",
            f"--secure-port={port}",
            f"--tls-cert-file={cert_file}",
            f"--tls-private-key-file={key_file}",
            "--authorization-mode=Node,RBAC",
            # Not on by default: it confines a kubelet to its own Node, Lease and pods.
            "--enable-admission-plugins=NodeRestriction",
            f"--token-auth-file={credentials.token_file}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={credentials.sa_pub}",
            f"--service-account-signing-key-file={credentials.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The `kubernetes` Service's endpoints would be the advertise address, and
            # validation refuses a loopback one: no pod reaches the API through it here.
            "--endpoint-reconciler-type=none",
            # `kubectl logs` goes through the API server to the node's kubelet
            # (kubelet_server.py): at the node's InternalIP (its Hostname resolves to
            # nothing here) and the port its status names, the kubelet's certificate
            # checked against the cluster's CA, the API server authenticated by its own.
            f"--kubelet-client-certificate={kubelet_cert}",
            f"--kubelet-client-key={kubelet_key}",
            f"--kubelet-certificate-authority={ca_file}",
            "--kubelet-preferred-address-types=InternalIP",
        ]
        self.url = f"https://{HOST}:{port}"
        apiserver = self._run("kube-apiserver", cmd)
        ready = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {credentials.admin_token}"}
        )
        self._wait(
            "kube-apiserver to answer /readyz",
            lambda: _answers(ready, self._tls()),
            [apiserver],
            deadline,
        )

    def _start_controller_manager(self, credentials: _Credentials, deadline: float) -> None:
        kubeconfig = write_kubeconfig(
            self.directory / "controller-manager.kubeconfig",
            self.url,
            self.ca_file,
            CONTROLLER_MANAGER_USER,
            credentials.controller_manager_token,
        )
        cmd = [
            str(self.binaries.kube_controller_manager),
            f"--kubeconfig={kubeconfig}",
            "--controllers=*",
            "--use-service-account-credentials",
            f"--service-account-private-key-file={credentials.sa_key}",
            f"--root-ca-file={self.ca_file}",
            "--leader-elect=false",
            "--secure-port=0",  # its own health and metrics server: nothing reads them
        ]
        if self.options.node_monitor_period_s is not None:
            cmd.append(f"--node-monitor-period={self.options.node_monitor_period_s}s")
        if self.options.node_monitor_grace_period_s is not None:
            cmd.append(f"--node-monitor-grace-period={self.options.node_monitor_grace_period_s}s")
        self._run("kube-controller-manager", cmd)
        default_sa = urllib.request.Request(
            f"{self.url}/api/v1/namespaces/default/serviceaccounts/default",
            headers={"Authorization": f"Bearer {credentials.admin_token}"},
        )
        self._wait(
            "kube-controller-manager to create the default ServiceAccount",
            lambda: _answers(default_sa, self._tls()),
            self._processes,
            deadline,
        )

    def _start_scheduler(self, credentials: _Credentials) -> None:
        """kube-scheduler with the default profile less NodeResourcesFit: the emulated
        nodes publish no CPU or memory (heartbeat.py), so a pod requesting either
        would fit none. Not waited for: a pod it has not bound yet stays Pending."""
        kubeconfig = write_kubeconfig(
            self.directory / "scheduler.kubeconfig",
            self.url,
            self.ca_file,
            SCHEDULER_USER,
            credentials.scheduler_token,
        )
        config = self.directory / "scheduler.yaml"
        profile = {
            "schedulerName": "default-scheduler",
            "plugins": {"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}},
        }
        scheduler_config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "profiles": [profile],
        }
        config.write_text(yaml.safe_dump(scheduler_config))
        cmd = [
            str(self.binaries.kube_scheduler),
            f"--config={config}",
            "--secure-port=0",  # as the controller manager's: nothing reads it
        ]
        self._run("kube-scheduler", cmd)

    def _run(self, name: str, cmd: Sequence[str]) -> _Process:
        process = _Process.start(name, cmd, self.directory, self.on_start)
        self._processes.append(process)
        return process

    def _tls(self) -> ssl.SSLContext:
        """Trusts the API server's certificate (which exists once it listens)."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _wait(
        self,
        what: str,
        ready: Callable[[], bool],
        processes: Sequence[_Process],
        deadline: float,
    ) -> None:
        """Poll `ready` until true; ControlPlaneError if one of `processes` exits or the
        deadline passes first."""
        while not ready():
            for process in processes:
                process.check_running()
            if time.monotonic() > deadline:
                tails = "".join(f"\n{p.name}{p.tail()}" for p in processes)
                raise ControlPlaneError(f"timed out waiting for {what}{tails}")
            time.sleep(POLL_S)


def _answers(request: urllib.request.Request, tls: ssl.SSLContext | None) -> bool:
    """Whether `request` is answered 200 now."""
    try:
        with urllib.request.urlopen(request, timeout=2.0, context=tls) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False  # not listening yet, not ready yet, or refused
