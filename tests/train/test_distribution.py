"""The job library installs alone: the `gpuflow-train` distribution
(packaging/gpuflow-train) built into a wheel and installed with pip, its installed
requirements and files read back, as a training image would get them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import Distribution, distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PROJECT = ROOT / "packaging" / "gpuflow-train"
# The server's dependencies, none of which a training image may pull.
SERVER = {"fastapi", "celery", "sqlalchemy", "kubernetes", "redis", "uvicorn", "alembic"}


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Distribution:
    """gpuflow-train as pip installs it, built from a copy of its project and sources
    (a build writes build/ and *.egg-info beside its pyproject.toml)."""
    tmp = tmp_path_factory.mktemp("gpuflow-train")
    project = tmp / "packaging" / "gpuflow-train"
    project.mkdir(parents=True)
    shutil.copy(PROJECT / "pyproject.toml", project)
    shutil.copytree(
        ROOT / "gpuflow" / "train",
        tmp / "gpuflow" / "train",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = tmp / "wheels"
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(project)]
    subprocess.run(build, check=True, capture_output=True, timeout=120)
    (wheel,) = wheels.glob("gpuflow_train-*.whl")
    site = tmp / "site"
    install = [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=120)
    (dist,) = (d for d in distributions(path=[str(site)]) if d.metadata["Name"] == "gpuflow-train")
    return dist


def test_the_job_library_requires_torch_and_httpx_and_nothing_of_the_server(
    installed: Distribution,
) -> None:
    names = {requirement_name(r) for r in installed.requires or []}
    assert names == {"httpx", "torch"}
    assert names.isdisjoint(SERVER)


def test_the_job_library_installs_gpuflow_train_and_no_other_module(
    installed: Distribution,
) -> None:
    sources = {str(f) for f in installed.files or [] if str(f).endswith(".py")}
    assert "gpuflow/train/reporter.py" in sources
    assert "gpuflow/train/driver.py" in sources
    assert all(f.startswith("gpuflow/train/") for f in sources), sources


def test_version_and_torch_pin_follow_the_main_distribution(installed: Distribution) -> None:
    main = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert installed.version == main["version"]
    (torch,) = main["optional-dependencies"]["torch"]
    assert torch in (installed.requires or [])
