"""`gpuflow submit` sends an Idempotency-Key and, when the answer is lost or is a 503,
sends the request once more with the same key: one job however the first attempt
ended (api.client). Against a real `gpuflow serve`, reached through a real TCP proxy
that loses chosen answers, as a load balancer or a network cut would.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.gpuflow.test_cli_client import _gpuflow, server

__all__ = ["server"]

_DOWN = b'{"detail": "database unavailable"}'
UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n"
    + f"Content-Length: {len(_DOWN)}\r\n\r\n".encode()
    + _DOWN
)


def _read_message(sock: socket.socket) -> bytes:
    """One HTTP/1.1 message (headers and a Content-Length body), b"" if the peer closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@dataclass
class Proxy:
    """Forwards one request per connection to `upstream`; the n-th request (from 0) is
    handled as `plan[n]` says: "lose" forwards it and drops the answer, "503" answers
    503 itself without forwarding, anything else (or past the plan) relays."""

    upstream: tuple[str, int]
    plan: list[str]
    keys: list[str] = field(default_factory=list)  # each request's Idempotency-Key
    _listener: socket.socket = field(default_factory=socket.socket)

    def start(self) -> str:
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        threading.Thread(target=self._serve, daemon=True).start()
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def stop(self) -> None:
        self._listener.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                request = _read_message(conn)
                if request:
                    self._handle(conn, request)

    def _handle(self, conn: socket.socket, request: bytes) -> None:
        n = len(self.keys)
        head = request.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        key = next(
            (
                line.split(":", 1)[1].strip()
                for line in head.split("\r\n")
                if line.lower().startswith("idempotency-key:")
            ),
            "",
        )
        self.keys.append(key)
        step = self.plan[n] if n < len(self.plan) else "relay"
        if step == "503":
            conn.sendall(UNAVAILABLE)
            return
        with socket.create_connection(self.upstream, timeout=60) as up:
            up.sendall(request)
            answer = _read_message(up)
        if step != "lose":
            conn.sendall(answer)


@pytest.fixture()
def proxy_for(server: tuple[str, dict[str, str]]) -> Iterator[list[Proxy]]:
    made: list[Proxy] = []
    yield made
    for p in made:
        p.stop()


def _jobs(url: str, env: dict[str, str]) -> list[dict[str, object]]:
    headers = {"Authorization": f"Bearer {env['GPUFLOW_TOKEN']}"}
    data: list[dict[str, object]] = httpx.get(f"{url}/api/v1/jobs", headers=headers).json()["data"]
    return data


def _submit_through(
    server: tuple[str, dict[str, str]], proxies: list[Proxy], plan: list[str]
) -> tuple[Proxy, int, str, str]:
    url, env = server
    port = int(url.rsplit(":", 1)[1])
    proxy = Proxy(("127.0.0.1", port), plan)
    proxies.append(proxy)
    through = {**env, "GPUFLOW_URL": proxy.start()}
    done = _gpuflow("submit", "-g", "1", "--duration", "600", "-n", "once", "--json", env=through)
    return proxy, done.returncode, done.stdout, done.stderr


@pytest.mark.slow
def test_a_lost_answer_is_retried_with_the_same_key_and_stores_one_job(
    server: tuple[str, dict[str, str]], proxy_for: list[Proxy]
) -> None:
    proxy, code, out, err = _submit_through(server, proxy_for, ["lose"])
    assert code == 0, err
    assert len(proxy.keys) == 2 and proxy.keys[0] and proxy.keys[0] == proxy.keys[1]
    jobs = _jobs(*server)
    assert [j["name"] for j in jobs] == ["once"]
    assert f'"id": "{jobs[0]["id"]}"' in out  # the first request's job, answered again


@pytest.mark.slow
def test_a_503_is_retried_once_with_the_same_key(
    server: tuple[str, dict[str, str]], proxy_for: list[Proxy]
) -> None:
    proxy, code, _, err = _submit_through(server, proxy_for, ["503"])
    assert code == 0, err
    assert len(proxy.keys) == 2 and proxy.keys[0] == proxy.keys[1]
    assert [j["name"] for j in _jobs(*server)] == ["once"]


@pytest.mark.slow
def test_two_lost_answers_are_one_error_line_and_still_one_job(
    server: tuple[str, dict[str, str]], proxy_for: list[Proxy]
) -> None:
    proxy, code, _, err = _submit_through(server, proxy_for, ["lose", "lose"])
    assert code == 1
    assert err.startswith("gpuflow: error: cannot reach the server") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert len(proxy.keys) == 2  # retried once, not more
    assert [j["name"] for j in _jobs(*server)] == ["once"]
