"""A stand-in for the API's POST /jobs/{id}/metrics: a real HTTP server in a thread
that records what arrives, and can answer slowly or with errors."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    token: str | None
    metrics: list[dict[str, Any]]
    at: float


@dataclass
class MetricsServer:
    delay_s: float = 0.0  # before answering each request
    status: int = 201
    requests: list[Received] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)  # monotonic time of each request
    _server: ThreadingHTTPServer | None = None

    def start(self) -> MetricsServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner.attempts.append(time.monotonic())
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(owner.delay_s)
                status = owner.status
                if status < 300:
                    owner.requests.append(
                        Received(
                            self.path,
                            self.headers.get("X-Job-Token"),
                            json.loads(body)["metrics"],
                            time.monotonic(),
                        )
                    )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def metrics(self, name: str | None = None) -> list[dict[str, Any]]:
        out = [m for r in list(self.requests) for m in r.metrics]
        return [m for m in out if name is None or m["name"] == name]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
