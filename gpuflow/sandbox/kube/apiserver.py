"""A strict in-memory Kubernetes API server over HTTP, for tests and the sandbox.

`KubeServer` runs a stdlib `ThreadingHTTPServer` in a thread; the `kube_server` pytest
fixture (`tests/kube/fixtures.py`) starts one per test, `gpuflow sandbox` one per
sandbox (gpuflow/sandbox/cluster.py), and `python -m
gpuflow.sandbox.kube.apiserver --port N` runs one by hand. This module is the HTTP layer: it
routes URLs to resource types, maps HTTP methods to verbs on `store.Store`, streams
watches as chunked JSON lines, and turns `ApiError` into `Status` bodies. Semantics live
in store.py (RVs, history, finalizers, GC), strategy.py (per-kind rules), schema.py,
patch.py, selectors.py, tables.py and discovery.py. See docs/kube-test-server.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import select
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from gpuflow.sandbox.kube import discovery
from gpuflow.sandbox.kube.errors import ApiError, bad_request, injected, method_not_allowed
from gpuflow.sandbox.kube.resources import Registry, ResourceType
from gpuflow.sandbox.kube.selectors import Matcher, matcher
from gpuflow.sandbox.kube.store import DeleteOptions, Store, WatchEvent, WriteOptions, WriteResult
from gpuflow.sandbox.kube.tables import to_table

log = logging.getLogger(__name__)
# How often an idle watch checks that its client is still there, so that abandoned
# watches do not hold a thread until their timeout.
_LIVENESS_CHECK_S = 1.0
Obj = dict[str, Any]


@dataclass(frozen=True)
class ServerOptions:
    history_limit: int = 10_000  # watch events retained (at least); older RVs get 410
    watch_timeout_s: float = 1800.0  # the real server's --min-request-timeout
    bookmark_interval_s: float = 1.0  # real servers send one about a minute; tests are short
    graceful_pods: bool = False  # see Store.graceful_pods


@dataclass(frozen=True)
class Route:
    rt: ResourceType
    namespace: str
    name: str
    subresource: str

    @property
    def resource(self) -> str:
        return f"{self.rt.plural}/{self.subresource}" if self.subresource else self.rt.plural


@dataclass(frozen=True)
class RequestRecord:
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


_NOT_FOUND = ApiError(
    404,
    "NotFound",
    "the server could not find the requested resource",
    {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]},
)


def parse_route(registry: Registry, path: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        inner = registry.lookup(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    rt = registry.lookup(group, version, rest[0])
    if rt is None or len(rest) > 3 or (namespace and not rt.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and not (sub == "status" and rt.status_subresource):
        return None
    return Route(rt, namespace, name, sub)


def _flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("1", "true")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], kube: KubeServer) -> None:
        self.kube = kube
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm
    # and the client's delayed ACK stall every keep-alive response by ~40 ms.
    disable_nagle_algorithm = True
    server: _HTTPServer

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
    def kube(self) -> KubeServer:
        return self.server.kube

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
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
                raise _NOT_FOUND
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
        for warning in warnings or []:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.end_headers()
        self.wfile.write(data)

    def _body(self, raw: bytes, yaml_ok: bool = False) -> Any:
        try:
            if yaml_ok:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise bad_request(f"error decoding request body: {e}") from e

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
            raise _NOT_FOUND
        self._send_json(200, doc)
        return True

    # --- resources ------------------------------------------------------------------

    def _resource(self, method: str, route: Route, query: dict[str, str], raw: bytes) -> None:
        verb = _verb(method, route, query)
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
                self._matcher(rt, query),
                int(query.get("limit") or 0),
                query.get("continue", ""),
            )
            self._respond_read(route, items, meta, query)
        elif verb == "watch":
            self._watch(route, query)
        elif verb == "create":
            self._respond_write(store.create(rt, route.namespace, self._body(raw), opts))
        elif verb == "update":
            self._respond_write(
                store.update(
                    rt, route.namespace, route.name, self._body(raw), route.subresource, opts
                )
            )
        elif verb == "patch":
            content_type = self.headers.get("Content-Type", "").split(";")[0].strip()
            body = self._body(raw, yaml_ok=content_type.endswith("yaml"))
            self._respond_write(
                store.patch(
                    rt, route.namespace, route.name, content_type, body, route.subresource, opts
                )
            )
        elif verb == "delete":
            result = store.delete(rt, route.namespace, route.name, self._delete_options(query, raw))
            self._respond_write(result)
        elif verb == "deletecollection":
            items = store.delete_collection(
                rt, route.namespace, self._matcher(rt, query), self._delete_options(query, raw)
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

    def _matcher(self, rt: ResourceType, query: dict[str, str]) -> Matcher:
        return matcher(
            query.get("labelSelector", ""), query.get("fieldSelector", ""), rt.selectable_fields()
        )

    def _delete_options(self, query: dict[str, str], raw: bytes) -> DeleteOptions:
        body = self._body(raw) if raw.strip() else {}
        grace = query.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
        pre = body.get("preconditions") or {}
        return DeleteOptions(
            propagation=query.get("propagationPolicy")
            or body.get("propagationPolicy")
            or "Background",
            grace_period_s=None if grace is None else int(grace),
            uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"),
            dry_run=bool(query.get("dryRun") or body.get("dryRun")),
        )

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
        rt, store = route.rt, self.kube.store
        match = self._matcher(rt, query)
        rv_param = query.get("resourceVersion", "")
        if rv_param and not rv_param.isdigit():
            raise bad_request(f'invalid resource version "{rv_param}"')
        timeout_s = float(query.get("timeoutSeconds") or self.kube.options.watch_timeout_s)
        bookmarks = _flag(query, "allowWatchBookmarks")
        initial = _flag(query, "sendInitialEvents")
        generation = self.kube.watch_generation
        deadline = time.monotonic() + timeout_s

        def stopped() -> bool:
            return self.kube.stopping or self.kube.watch_generation != generation

        def ended() -> bool:
            return stopped() or self._client_gone()

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        view = _Viewer(rt, route.namespace, match)
        try:
            if rv_param in ("", "0") or initial:
                items, last_rv = store.snapshot(rt, route.namespace)
                for obj in items:
                    if match(obj):
                        self._chunk({"type": "ADDED", "object": obj})
                if initial:
                    self._chunk(view.bookmark(last_rv, initial_end=True))
            else:
                last_rv = int(rv_param)
            last_bookmark = time.monotonic()
            while not ended():
                now = time.monotonic()
                wait = min(deadline - now, _LIVENESS_CHECK_S)
                if bookmarks:
                    wait = min(wait, last_bookmark + self.kube.options.bookmark_interval_s - now)
                if deadline - now <= 0:
                    break
                events, last_rv = store.events_after(rt.key, last_rv, max(wait, 0), stopped)
                for event in events:
                    shown = view.event(event)
                    if shown is not None:
                        self._chunk(shown)
                if (
                    bookmarks
                    and time.monotonic() - last_bookmark >= self.kube.options.bookmark_interval_s
                ):
                    self._chunk(view.bookmark(last_rv))
                    last_bookmark = time.monotonic()
            if self.kube.cut_abruptly and self.kube.watch_generation != generation:
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
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _chunk(self, event: Obj) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


@dataclass(frozen=True)
class _Viewer:
    """What one watcher sees of a store event, selectors applied as the watch cache does:
    an object leaving the selection is DELETED for it, one entering it is ADDED."""

    rt: ResourceType
    namespace: str
    match: Matcher

    def _passes(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.match(obj)

    def event(self, event: WatchEvent) -> Obj | None:
        new = {**event.obj, "apiVersion": self.rt.api_version}
        if event.type == "ADDED":
            return {"type": "ADDED", "object": new} if self._passes(event.obj) else None
        if event.type == "DELETED":
            passes = self._passes(event.old or event.obj)
            return {"type": "DELETED", "object": new} if passes else None
        now, before = self._passes(event.obj), self._passes(event.old)
        if now:
            return {"type": "MODIFIED" if before else "ADDED", "object": new}
        if before and event.old is not None:
            old = {
                **event.old,
                "apiVersion": self.rt.api_version,
                "metadata": {**event.old["metadata"], "resourceVersion": str(event.rv)},
            }
            return {"type": "DELETED", "object": old}
        return None

    def bookmark(self, rv: int, initial_end: bool = False) -> Obj:
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {
            "type": "BOOKMARK",
            "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta},
        }


def _verb(method: str, route: Route, query: dict[str, str]) -> str:
    if method == "GET":
        if route.name:
            return "get"
        return "watch" if _flag(query, "watch") else "list"
    if route.name:
        verbs = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    else:
        verbs = {"POST": "create", "DELETE": "deletecollection"}
        if method == "POST" and route.rt.namespaced and not route.namespace:
            raise method_not_allowed()
    if method not in verbs:
        raise method_not_allowed()
    return verbs[method]


class KubeServer:
    """The server, its store and the test hooks. Use as a context manager or start/stop."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, options: ServerOptions = ServerOptions()
    ) -> None:
        self.options = options
        self.registry = Registry()
        self.store = Store(self.registry, options.history_limit, options.graceful_pods)
        self.faults = Faults()
        self.requests: collections.deque[RequestRecord] = collections.deque(maxlen=10_000)
        self.stopping = False
        self.watch_generation = 0
        self.cut_abruptly = False
        self._httpd = _HTTPServer((host, port), self)
        self._thread: threading.Thread | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="kube-test-server-")
        self.kubeconfig = Path(self._tmp.name) / "kubeconfig"
        self.write_kubeconfig(self.kubeconfig)
        self._clients: list[Any] = []

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def record(self, request: RequestRecord) -> None:
        self.requests.append(request)

    def start(self) -> KubeServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="kube-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        self.store.wake_watchers()
        for client in self._clients:
            client.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self._tmp.cleanup()

    def __enter__(self) -> KubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- test hooks -----------------------------------------------------------------

    def compact(self) -> int:
        """Drop the watch history: open watches and every RV handed out so far get 410."""
        return self.store.compact()

    def close_watches(self, abrupt: bool = False) -> None:
        """End every open watch stream, cleanly (as a server timeout) or by cutting it."""
        self.cut_abruptly = abrupt
        self.watch_generation += 1
        self.store.wake_watchers()

    def fail_next(self, verb: str, resource: str, code: int) -> None:
        """Fail the next `verb` ("create", "patch", ... or "*") on `resource` ("pods",
        "dljobs/status", or "*") with a Status of `code` (409, 500, 503, ...)."""
        self.faults.add(verb, resource, code)

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "kube-test",
            "clusters": [{"name": "kube-test", "cluster": {"server": self.url}}],
            "users": [{"name": "kube-test", "user": {}}],
            "contexts": [
                {
                    "name": "kube-test",
                    "context": {
                        "cluster": "kube-test",
                        "user": "kube-test",
                        "namespace": namespace,
                    },
                }
            ],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` for this server, closed when the server stops."""
        from kubernetes import client  # type: ignore[import-untyped]

        configuration = client.Configuration()
        configuration.host = self.url
        api_client = client.ApiClient(configuration)
        self._clients.append(api_client)
        return api_client

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Poll until `predicate()` holds (for asynchronous effects in tests)."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not reached")
            time.sleep(0.01)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="strict in-memory Kubernetes API server for tests")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--kubeconfig", type=Path, help="also write a kubeconfig here")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    server = KubeServer(args.host, args.port)
    if args.kubeconfig:
        server.write_kubeconfig(args.kubeconfig)
    sys.stdout.write(
        f"serving on {server.url}; kubeconfig: {args.kubeconfig or server.kubeconfig}\n"
    )
    sys.stdout.flush()
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping = True
        server.store.wake_watchers()
        server._httpd.server_close()


if __name__ == "__main__":
    main()
