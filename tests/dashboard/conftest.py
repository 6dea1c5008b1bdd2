"""Fixtures for the dashboard tests: the API under uvicorn, headless Chromium, pages.

The service runs in local mode (2x4 simulated GPUs, time scale 100) on a PostgreSQL
database of this directory's own (created and migrated once, tables truncated after
each test; the server and names as in tests/api/conftest.py, whose session fixtures
cannot be shared without creating its database twice), under uvicorn in a thread on
a port the OS picked. Chromium is Debian's (`.ci/run` installs it), driven by Playwright for
Python through `executable_path`. Every page records console errors, uncaught
exceptions and requests to any other host, and leaves a screenshot in
out/test-artifacts/dashboard/. `sign_in`, `submit` and `job_status` are the tests'
shared steps.
"""

from __future__ import annotations

import re
import shutil
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from api.app import create_app
from api.settings import Settings
from tests import waiting
from tests.api.builders import job_spec
from tests.postgres import migrated_database, truncate_all

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts" / "dashboard"
TIMEOUT_MS = 15_000  # generous: CI machines are shared; waits end as soon as the page is ready
expect.set_options(timeout=TIMEOUT_MS)


@dataclass
class LiveServer:
    url: str
    app: FastAPI


@dataclass
class Watched:
    """A page and what it did that a test may assert on."""

    page: Page
    origin: str
    console_errors: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)

    def assert_clean(self, allowed: tuple[str, ...] = ()) -> None:
        """No console error (but those containing an allowed fragment), no other host."""
        errors = [e for e in self.console_errors if not any(a in e for a in allowed)]
        assert errors == [], errors
        assert self.foreign_requests == [], self.foreign_requests


@pytest.fixture(scope="session")
def dashboard_db() -> Iterator[str]:
    with migrated_database("gpuflow_dashboard") as url:
        yield url


@pytest.fixture()
def settings(dashboard_db: str, tmp_path: Path) -> Iterator[Settings]:
    settings = Settings(
        database_url=dashboard_db,
        data_dir=tmp_path,
        cluster="2x4",
        time_scale=100.0,
        round_interval_s=0.0,
        sync_interval_s=0.05,
    )
    yield settings
    truncate_all(settings)


@pytest.fixture()
def server(settings: Settings) -> Iterator[LiveServer]:
    app = create_app(settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    waiting.wait_for("uvicorn to start", lambda: uv.started, timeout_s=30)
    yield LiveServer(f"http://127.0.0.1:{port}", app)
    uv.should_exit = True
    thread.join(timeout=30)
    sock.close()


def _chromium() -> str:
    for path in CHROMIUM_PATHS:
        if Path(path).exists():
            return path
    found = shutil.which("chromium")
    if found is None:
        pytest.skip("no chromium: as root, `.ci/run` installs it (apt-get install chromium)")
    return found


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=_chromium(), headless=True)
    yield browser
    browser.close()


@pytest.fixture()
def watched(
    browser: Browser, server: LiveServer, request: pytest.FixtureRequest
) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    origin = urlsplit(server.url).netloc
    w = Watched(page, origin)
    page.on("console", lambda m: w.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: w.console_errors.append(f"uncaught: {exc}"))

    def on_request(req: object) -> None:
        url = getattr(req, "url", "")
        host = urlsplit(url).netloc
        if urlsplit(url).scheme in ("http", "https", "ws", "wss") and host != origin:
            w.foreign_requests.append(url)

    page.on("request", on_request)
    yield w
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^\w.-]+", "_", request.node.name)  # parameters hold slashes
    page.screenshot(path=ARTIFACTS / f"{name}-end.png", full_page=True)
    context.close()


def sign_in(w: Watched, server: LiveServer, headers: dict[str, str]) -> None:
    """Open the dashboard and sign in with the token of `headers` (tests.api.builders.auth)."""
    w.page.goto(server.url + "/")
    w.page.get_by_label("API token").fill(headers["Authorization"].removeprefix("Bearer "))
    w.page.get_by_role("button", name="Sign in").click()
    expect(w.page.get_by_role("navigation", name="Dashboard pages")).to_be_visible()


def submit(server: LiveServer, headers: dict[str, str], **spec: Any) -> dict[str, Any]:
    r = httpx.post(f"{server.url}/api/v1/jobs", json=job_spec(**spec), headers=headers)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def job_status(server: LiveServer, headers: dict[str, str], job_id: str) -> str:
    r = httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers=headers)
    assert r.status_code == 200, r.text
    status: str = r.json()["status"]
    return status
