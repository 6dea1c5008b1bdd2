"""`gpuflow submit --image --command`: the worker's container for a cluster-mode job
(issue 25: a job submitted without one held its GPUs in CreateContainerConfigError).
The request is read by a server that records it: what the CLI sends, not what a
server does with it (tests/api check that)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpuflow.cli import main


class Recorder(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        self.bodies.append(body)
        answer = json.dumps({"id": "0" * 32, **body, "status": "Queued"}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    Recorder.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/v1"
    server.shutdown()
    server.server_close()


SUBMIT = ["submit", "-g", "2", "--duration", "60", "--token", "t", "--json"]


def test_image_and_command_reach_the_request(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    command = "python -m examples.train.train --steps=2000 --note='two words'"
    argv = [*SUBMIT, "--url", url, "--image", "gpuflow-train:1", "--command", command]
    assert main(argv) == 0
    (body,) = Recorder.bodies
    assert body["image"] == "gpuflow-train:1"
    assert body["command"] == [
        "python", "-m", "examples.train.train", "--steps=2000", "--note=two words"
    ]  # fmt: skip
    assert json.loads(capsys.readouterr().out)["command"] == body["command"]


def test_without_them_the_request_names_neither(url: str) -> None:
    assert main([*SUBMIT, "--url", url]) == 0
    (body,) = Recorder.bodies
    assert "image" not in body and "command" not in body


@pytest.mark.parametrize("command", ["python -c 'unclosed", "   "])
def test_a_bad_command_line_is_one_line_and_exit_2(
    url: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SUBMIT, "--url", url, "--command", command]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuflow: error: --command: ") and err.count("\n") == 1
    assert Recorder.bodies == []  # nothing sent
