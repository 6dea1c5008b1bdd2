"""A strict in-memory Kubernetes API server over HTTP, for tests and the sandbox.

`KubeServer` runs a stdlib `ThreadingHTTPServer` in a thread; the `kube_server` pytest
fixture (`tests/kube/fixtures.py`) starts one per test, `gpuflow sandbox` one per
sandbox (gpuflow/sandbox/cluster.py), and `python -m gpuflow.sandbox.kube.apiserver
--port N` runs one by hand. This module holds the server's life (start, stop), its
test hooks (compact, close_watches, fail_next, requests, kubeconfig, api_client) and
`__main__`. Requests are served by handler.py (routing.py, watch.py); semantics live
in store.py (writes, reads, watches' events) with objects.py, history.py (RVs, the
watch history) and deletion.py (finalizers, GC), strategy.py (per-kind rules),
schema.py, patch.py, selectors.py, tables.py and discovery.py. See
docs/kube-test-server.md.
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gpuflow.sandbox.kube.resources import Registry
from gpuflow.sandbox.kube.serving.handler import Faults, KubeHTTPServer, RequestRecord
from gpuflow.sandbox.kube.serving.options import ServerOptions
from gpuflow.sandbox.kube.storage.store import Store

__all__ = ["KubeServer", "ServerOptions", "main"]  # ServerOptions: where callers find it
DEFAULT_OPTIONS = ServerOptions()  # frozen, so one instance serves every server


class KubeServer:
    """The server, its store and the test hooks. Use as a context manager or start/stop."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, options: ServerOptions = DEFAULT_OPTIONS
    ) -> None:
        self.options = options
        self.registry = Registry()
        self.store = Store(self.registry, options.history_limit, options.graceful_pods)
        self.faults = Faults()
        self.requests: collections.deque[RequestRecord] = collections.deque(maxlen=10_000)
        self.stopping = False
        self.watch_generation = 0
        self.cut_abruptly = False
        self._httpd = KubeHTTPServer((host, port), self)
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
            _close_client(client)
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.cut_connections()
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


def _close_client(client: Any) -> None:
    """Close what an ApiClient still holds: the response it keeps as `last_response`
    (unread, when a caller asked `_preload_content=False` and dropped it: its socket is
    still checked out), the idle connections of its pool, and its thread pool. Left to
    the garbage collector, an ApiClient in a reference cycle takes its sockets with it
    in whatever order the collector picks, and a socket finalised before its response
    warns `unclosed socket` in whichever test is running then."""
    client.last_response = None
    client.rest_client.pool_manager.clear()
    client.close()


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
