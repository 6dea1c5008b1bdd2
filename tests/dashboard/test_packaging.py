"""The dashboard ships in the wheel: the project built with pip and installed into a
folder of its own, then `api.dashboard.install` run from there (not from this checkout)
serves web/src/'s files, byte for byte, and nothing else of web/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = ("controller", "policies", "gpuflow", "operators", "api", "experiments", "web")
# Run in the installed copy: a bare app with the dashboard mounted, asked over ASGI.
SERVE = """
import json, sys
import api, web
from fastapi import FastAPI
from fastapi.testclient import TestClient
from api.dashboard import install
app = FastAPI()
install(app)
paths = sys.argv[1:]
with TestClient(app) as client:
    answers = {p: client.get(p) for p in paths}
    print(json.dumps({
        "api": api.__file__, "web": web.__file__,
        "status": {p: r.status_code for p, r in answers.items()},
        "body": {p: r.text for p, r in answers.items() if r.status_code == 200},
    }))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project as `pip install .` lays it out, built from a copy of its sources
    (a build writes build/ and *.egg-info beside pyproject.toml)."""
    tmp = tmp_path_factory.mktemp("wheel")
    project = tmp / "project"
    skip = shutil.ignore_patterns("__pycache__", "node_modules")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, project / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = tmp / "wheels"
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(project)]
    subprocess.run(build, check=True, capture_output=True, timeout=120)
    (wheel,) = wheels.glob("gpuflow-*.whl")
    site = tmp / "site"
    install = [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=120)
    return site


def _serve(site: Path, paths: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", SERVE, *paths],
        cwd=site.parent,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_the_installed_package_serves_the_dashboard_from_web_src(site: Path) -> None:
    sources = sorted(p.name for p in (ROOT / "web" / "src").iterdir())
    assert {"index.html", "dashboard.js", "cluster.js", "dashboard.css"} <= set(sources)
    paths = ["/", *(f"/static/dashboard/{name}" for name in sources)]
    vendored = "/static/vendor/uplot/uPlot.iife.min.js"
    hidden = ["/static/dashboard/__init__.py", "/static/dashboard/package.json"]
    answer = _serve(site, [*paths, vendored, *hidden])

    assert Path(answer["api"]).is_relative_to(site)  # the installed copy, not this checkout
    assert Path(answer["web"]).is_relative_to(site)
    assert {p: answer["status"][p] for p in [*paths, vendored]} == dict.fromkeys(
        [*paths, vendored], 200
    )
    for name in sources:
        assert answer["body"][f"/static/dashboard/{name}"] == (
            ROOT / "web" / "src" / name
        ).read_text(encoding="utf-8"), name
    assert answer["body"]["/"] == answer["body"]["/static/dashboard/index.html"]
    assert 'src="/static/dashboard/dashboard.js"' in answer["body"]["/"]
    # Only the browser's files: the package's module and npm's manifest stay unserved.
    assert [answer["status"][p] for p in hidden] == [404, 404]
