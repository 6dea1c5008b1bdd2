"""The HTTP handler of the test server: one request in, one response or watch out.

`KubeServer` (apiserver.py) serves each connection with a `Handler` (through
`KubeHTTPServer`, which hands it the server as `Served`). A request is recorded and
checked against the faults a test asked for; health checks and discovery documents
(discovery.py) are answered directly; a resource URL is routed (routing.py) to a verb
on `store.Store` — get, list (as a Table with tables.py when asked), create, update,
patch, delete, deletecollection — or to a watch stream (watch.py); an `ApiError`
becomes its `Status` body.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from gpuflow.sandbox.kube.errors import ApiError, injected, method_not_allowed
from gpuflow.sandbox.kube.resources import Registry
from gpuflow.sandbox.kube.serving import discovery
from gpuflow.sandbox.kube.serving.options import ServerOptions
from gpuflow.sandbox.kube.serving.routing import (
    NOT_FOUND,
    Route,
    decode_body,
    delete_options,
    matcher_of,
    parse_route,
    verb_of,
)
from gpuflow.sandbox.kube.serving.tables import to_table
from gpuflow.sandbox.kube.serving.watch import WatchRequest, stream
from gpuflow.sandbox.kube.storage.store import Store, WriteOptions, WriteResult

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclass(frozen=True)
class RequestRecord:
    """A request as `KubeServer.requests` keeps it, for tests' assertions."""

    method: str
    path: str
    accept: str
    content_type: str


@dataclass
class Faults:
    """Errors a test asked for: the next matching request fails with `code`."""

    _pending: list[tuple[str, str, int]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, verb: str, resource: str, code: int) -> None:
        with self._lock:
            self._pending.append((verb, resource, code))

    def take(self, verb: str, resource: str) -> int | None:
        with self._lock:
            for i, (v, r, code) in enumerate(self._pending):
                if v in (verb, "*") and r in (resource, "*"):
                    del self._pending[i]
                    return code
        return None


class Served(Protocol):
    """What the handler reads of the server it serves (apiserver.KubeServer)."""

    registry: Registry
    store: Store
    faults: Faults
    options: ServerOptions
    stopping: bool  # the server is shutting down: watches end
    watch_generation: int  # bumped by close_watches: watches opened before it end
    cut_abruptly: bool  # ... by cutting their connection rather than ending cleanly

    @property
    def url(self) -> str: ...

    def record(self, request: RequestRecord) -> None: ...


class KubeHTTPServer(ThreadingHTTPServer):
    """The HTTP server a KubeServer runs: one thread per connection, each a `Handler`."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], kube: Served) -> None:
        self.kube = kube
        # The connections being served: a kept-alive client connection holds its
        # thread in a blocking read after the server stops, until it is cut.
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        """End every connection still open (the server has stopped accepting): each
        handler thread reads end-of-file, returns and closes its socket, so a stopped
        server leaves neither threads nor file descriptors behind."""
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):  # already closed by its thread
                sock.shutdown(socket.SHUT_RDWR)


class Handler(BaseHTTPRequestHandler):
    """One connection's requests: each routed, dispatched to the store, answered."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm
    # and the client's delayed ACK stall every keep-alive response by ~40 ms.
    disable_nagle_algorithm = True
    server: KubeHTTPServer
    # The Warning of the request's resource when its CRD version is deprecated.
    _deprecation: str | None = None

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # --- plumbing -------------------------------------------------------------------

    @property
    def kube(self) -> Served:
        return self.server.kube

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self._deprecation = None  # one handler serves a keep-alive's requests
        self.kube.record(
            RequestRecord(
                method,
                self.path,
                self.headers.get("Accept", ""),
                self.headers.get("Content-Type", ""),
            )
        )
        try:
            if method == "GET" and self._non_resource(url.path):
                return
            route = parse_route(self.kube.registry, url.path)
            if route is None:
                raise NOT_FOUND
            self._deprecation = route.rt.deprecation_warning
            self._resource(method, route, query, raw)
        except ApiError as e:
            self._send_json(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away; nobody to answer
        except Exception as e:  # a server bug must still answer, as a real 500 would
            log.exception("internal error serving %s %s", method, self.path)
            self._send_json(500, ApiError(500, "InternalError", f"Internal error: {e}").status())

    def _send_json(self, code: int, obj: Obj, warnings: list[str] | None = None) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self._send_warnings(warnings or [])
        self.end_headers()
        self.wfile.write(data)

    def _send_warnings(self, warnings: list[str]) -> None:
        """Warning headers: the request's own, and a deprecated version's, as the real
        server sends them and kubectl prints them."""
        deprecation = self._deprecation
        for warning in [*([deprecation] if deprecation else []), *warnings]:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")

    def _non_resource(self, path: str) -> bool:
        path = path.rstrip("/") or "/"
        registry = self.kube.registry
        doc: Obj | None
        if path in ("/healthz", "/livez", "/readyz"):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return True
        if path == "/version":
            doc = discovery.VERSION_INFO
        elif path == "/api":
            doc = discovery.api_versions(urlsplit(self.kube.url).netloc)
        elif path == "/apis":
            doc = discovery.api_group_list(registry)
        elif path == "/openapi/v3":
            doc = discovery.openapi_v3_index(registry)
        elif path.startswith("/openapi/v3/"):
            doc = discovery.openapi_v3_doc(registry, path[len("/openapi/v3/") :])
        elif path.startswith("/apis/") and path.count("/") == 2:
            doc = discovery.api_group(registry, path.split("/")[2])
        elif path.startswith("/apis/") and path.count("/") == 3:
            doc = discovery.api_resource_list(registry, *path.split("/")[2:4])
        elif path == "/api/v1":
            doc = discovery.api_resource_list(registry, "", "v1")
        else:
            return False
        if doc is None:
            raise NOT_FOUND
        self._send_json(200, doc)
        return True

    # --- resources ------------------------------------------------------------------

    def _resource(self, method: str, route: Route, query: dict[str, str], raw: bytes) -> None:
        verb = verb_of(method, route, query)
        code = self.kube.faults.take(verb, route.resource)
        if code is not None:
            raise injected(code, verb, route.resource)
        rt, store = route.rt, self.kube.store
        opts = WriteOptions(
            dry_run=bool(query.get("dryRun")),
            field_validation=query.get("fieldValidation") or "Warn",
        )
        if verb == "get":
            self._respond_read(route, [store.get(rt, route.namespace, route.name)], None, query)
        elif verb == "list":
            items, meta = store.list_objects(
                rt,
                route.namespace,
                matcher_of(rt, query),
                int(query.get("limit") or 0),
                query.get("continue", ""),
            )
            self._respond_read(route, items, meta, query)
        elif verb == "watch":
            self._watch(route, query)
        elif verb == "create":
            self._respond_write(store.create(rt, route.namespace, decode_body(raw), opts))
        elif verb == "update":
            self._respond_write(
                store.update(
                    rt, route.namespace, route.name, decode_body(raw), route.subresource, opts
                )
            )
        elif verb == "patch":
            content_type = self.headers.get("Content-Type", "").split(";")[0].strip()
            body = decode_body(raw, yaml_ok=content_type.endswith("yaml"))
            self._respond_write(
                store.patch(
                    rt, route.namespace, route.name, content_type, body, route.subresource, opts
                )
            )
        elif verb == "delete":
            result = store.delete(rt, route.namespace, route.name, delete_options(query, raw))
            self._respond_write(result)
        elif verb == "deletecollection":
            items = store.delete_collection(
                rt, route.namespace, matcher_of(rt, query), delete_options(query, raw)
            )
            self._send_json(
                200,
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": {},
                    "items": items,
                },
            )
        else:
            raise method_not_allowed()

    def _respond_read(
        self, route: Route, items: list[Obj], list_meta: Obj | None, query: dict[str, str]
    ) -> None:
        rt = route.rt
        if "as=Table" in self.headers.get("Accept", ""):
            meta = (
                list_meta
                if list_meta is not None
                else {"resourceVersion": items[0]["metadata"]["resourceVersion"]}
            )
            self._send_json(200, to_table(rt, items, meta, query.get("includeObject", "Metadata")))
        elif list_meta is None:
            self._send_json(200, items[0])
        else:
            self._send_json(
                200,
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": list_meta,
                    "items": items,
                },
            )

    def _respond_write(self, result: WriteResult) -> None:
        self._send_json(result.code, result.obj, result.warnings)

    # --- watch ----------------------------------------------------------------------

    def _watch(self, route: Route, query: dict[str, str]) -> None:
        kube = self.kube
        match = matcher_of(route.rt, query)
        request = WatchRequest.parse(route, query, match, kube.options.watch_timeout_s)
        generation = kube.watch_generation

        def stopped() -> bool:
            return kube.stopping or kube.watch_generation != generation

        def ended() -> bool:
            return stopped() or self._client_gone()

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self._send_warnings([])
        self.end_headers()
        try:
            stream(
                request, kube.store, kube.options.bookmark_interval_s, self._chunk, stopped, ended
            )
            if kube.cut_abruptly and kube.watch_generation != generation:
                self.close_connection = True
                return
        except ApiError as e:
            self._chunk({"type": "ERROR", "object": e.status()})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")

    def _client_gone(self) -> bool:
        """A watcher that hung up: its socket reads as closed (nothing else is sent)."""
        # poll(), not select(): select() refuses a descriptor past FD_SETSIZE (1024),
        # which a long test session's process reaches.
        try:
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)
            return bool(poller.poll(0)) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _chunk(self, event: Obj) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
