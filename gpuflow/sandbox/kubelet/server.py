"""An emulated kubelet's HTTPS server: its pods' container logs, as `kubectl logs` reads them.

A ProcessKubelet (kubelet.py) that is given TLS material (kubelet_pki.py) starts one
`KubeletServer` on its node's address and publishes the port in its Node's
status.daemonEndpoints.kubeletEndpoint (heartbeat.py). The API server then proxies
`kubectl logs` (GET pods/log) there, as it does to a kubelet's port 10250
(controlplane.py's --kubelet-* flags). As root the node is a network namespace
(network.py) and the listening socket is made inside it, so the server answers at the
node's own address, where the API server dials; otherwise on loopback.

One route, the kubelet's (pkg/kubelet/server/server.go `getContainerLogs`):

    GET /containerLogs/{namespace}/{pod}/{container}?tailLines=&follow=&limitBytes=
        &timestamps=&sinceSeconds=&sinceTime=&previous=

It answers with the container's stdout and stderr (the file the kubelet writes them
to, container_output.py): the lines that arrived since `sinceSeconds` ago or
`sinceTime`, of those the last `tailLines`, each prefixed with the time it arrived
(RFC 3339 with nanoseconds) with `timestamps`, at most `limitBytes` bytes, and with
`follow` what the process writes next until it exits or the client goes. Errors are
plain text, as the kubelet's: 400 for a bad parameter or a container that is not
running here (no previous container exists: containers are never restarted in
place), 404 for a pod the node does not run.

Clients must present a certificate signed by the cluster's CA (the API server's
--kubelet-client-certificate); the kubelet's authorisation of that identity
(a SubjectAccessReview for nodes/proxy) is not emulated.
"""

from __future__ import annotations

import ctypes
import logging
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpuflow.sandbox.kubelet.output import LineTimes
from gpuflow.sandbox.kubelet.pki import KubeletTls

log = logging.getLogger(__name__)

FOLLOW_POLL_S = 0.2  # how often a followed log is read for more
BLOCK_BYTES = 64 * 1024  # read from the end in blocks this size to find the tail
CLONE_NEWNET = 0x40000000  # <sched.h>: setns(2) into a network namespace
NETNS_DIR = Path("/var/run/netns")  # where `ip netns add` names its namespaces
TRUE = ("true", "1")


class NoLog(Exception):
    """What the kubelet answers instead of a log: an HTTP status and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ContainerLog:
    """Where a container's output is, and whether more may come (its process, or one
    it left behind, still holds the pipe: a follower reads on)."""

    path: Path
    running: Callable[[], bool]


# (namespace, pod, container) -> its log, or NoLog raised with the kubelet's answer.
LogLookup = Callable[[str, str, str], ContainerLog]


def tail_bytes(path: Path, lines: int | None, start: int = 0) -> tuple[bytes, int]:
    """The last `lines` lines of the file from byte `start` on (all of that for None)
    and the file's length when read (where a follower goes on from)."""
    with path.open("rb") as f:
        end = f.seek(0, 2)
        start = min(start, end)
        if lines is None:
            f.seek(start)
            return f.read(end - start), end
        if lines == 0:
            return b"", end
        pos, data = end, b""
        # One more newline than lines wanted: the file's own last one ends the last line.
        while pos > start and data.count(b"\n") <= lines:
            step = min(BLOCK_BYTES, pos - start)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
        kept = data.split(b"\n")
        ends_in_newline = data.endswith(b"\n")
        wanted = lines + 1 if ends_in_newline else lines
        return b"\n".join(kept[-wanted:]), end


class KubeletServer:
    """`start()` it (the port it listens on), `stop()` it."""

    def __init__(
        self, address: str, tls: KubeletTls, lookup: LogLookup, netns: str | None = None
    ) -> None:
        self.address = address
        self.tls = tls
        self.lookup = lookup
        self.netns = netns
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> int:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.tls.cert_file, self.tls.key_file)
        context.load_verify_locations(self.tls.client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED  # the API server's client certificate
        sock = _listening_socket(self.address, self.netns)
        self.port = int(sock.getsockname()[1])
        server = _Server((self.address, self.port), _handler(self), False)
        server.daemon_threads = True
        server.socket.close()  # the one it made unbound: ours is bound where it must be
        # The handshake happens in each request's thread, on its first read.
        server.socket = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            args=(0.2,),
            daemon=True,
            name=f"kubelet-server-{self.port}",
        )
        self._thread.start()
        log.info("kubelet server address=%s port=%d netns=%s", self.address, self.port, self.netns)
        return self.port

    def stop(self) -> None:
        self._stop.set()  # followers end
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def serve_log(self, handler: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(handler.path)
        parts = url.path.split("/")
        if len(parts) != 5 or parts[1] != "containerLogs" or not all(parts[2:]):
            raise NoLog(404, f"no route {url.path}: this kubelet serves /containerLogs only")
        namespace, pod, container = parts[2:]
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        if query.get("previous", "").lower() in TRUE:
            raise NoLog(
                400, f'previous terminated container "{container}" in pod "{pod}" not found'
            )
        tail = _count(query, "tailLines", 0)
        limit = _count(query, "limitBytes", 1)
        follow = query.get("follow", "").lower() in TRUE
        stamps = query.get("timestamps", "").lower() in TRUE
        since_ns = _since_ns(query)
        found = self.lookup(namespace, pod, container)
        times = LineTimes(found.path) if stamps or since_ns is not None else None
        start = 0
        if times is not None and since_ns is not None:
            first = times.first_since(since_ns)
            start = found.path.stat().st_size if first is None else first
        data, offset = tail_bytes(found.path, tail, start)
        if times is not None and stamps:
            data = times.stamped(data, offset - len(data))
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()
        sent = _write(handler, data, limit, 0)
        while follow and (limit is None or sent < limit) and not self._stop.is_set():
            running = found.running()  # before the read: what it wrote before it exited
            with found.path.open("rb") as f:
                f.seek(offset)
                more = f.read()
            if times is not None and stamps:
                times.refresh()
                more_shown = times.stamped(more, offset)
            else:
                more_shown = more
            offset += len(more)
            sent = _write(handler, more_shown, limit, sent)
            if not running:
                break
            time.sleep(FOLLOW_POLL_S)


def _write(handler: BaseHTTPRequestHandler, data: bytes, limit: int | None, sent: int) -> int:
    if limit is not None:
        data = data[: max(0, limit - sent)]
    if data:
        handler.wfile.write(data)
        handler.wfile.flush()
    return sent + len(data)


def _since_ns(query: dict[str, str]) -> int | None:
    """The Unix time in ns that `sinceSeconds` (before now) or `sinceTime` (RFC 3339)
    names; None if neither; NoLog 400 if both or a bad value."""
    if "sinceSeconds" in query and "sinceTime" in query:
        raise NoLog(400, "at most one of sinceTime or sinceSeconds may be specified")
    seconds = _count(query, "sinceSeconds", 1)
    if seconds is not None:
        return time.time_ns() - seconds * 1_000_000_000
    text = query.get("sinceTime")
    if text is None:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise NoLog(400, f"sinceTime: expected an RFC 3339 time, not {text!r}") from None
    if at.tzinfo is None:
        raise NoLog(400, f"sinceTime: expected a time with its zone, not {text!r}")
    return int(at.timestamp() * 1_000_000_000)


def _count(query: dict[str, str], name: str, least: int) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    if not text.isdigit() or int(text) < least:
        raise NoLog(400, f"{name}: expected a whole number >= {least}, not {text!r}")
    return int(text)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed before a request (a client without the cluster's
        certificate fails its handshake): one line, not socketserver's traceback."""
        log.info("kubelet server connection failed client=%s error=%s", client_address,
                 sys.exc_info()[1])  # fmt: skip


def _handler(server: KubeletServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                server.serve_log(self)
            except NoLog as exc:
                self.send_error_text(exc.status, exc.message)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass  # the client went (a follower stopped with ^C)

        def send_error_text(self, status: int, message: str) -> None:
            body = message.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("kubelet server %s", format % args)

    return Handler


def _listening_socket(address: str, netns: str | None) -> socket.socket:
    """A TCP socket bound to `address` on a free port, made inside network namespace
    `netns` if given: setns(2) moves only the calling thread, so a thread of its own
    enters the namespace, makes the socket (which stays in it) and leaves."""
    if netns is None:
        return _bound(address)
    made: dict[str, Any] = {}

    def make() -> None:
        try:
            with (
                open("/proc/thread-self/ns/net", "rb") as own,
                (NETNS_DIR / netns).open("rb") as target,
            ):
                _setns(target.fileno())
                try:
                    made["socket"] = _bound(address)
                finally:
                    _setns(own.fileno())
        except OSError as exc:
            made["error"] = exc

    thread = threading.Thread(target=make, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]
    sock: socket.socket = made["socket"]
    return sock


def _bound(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 0))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {errno}")
