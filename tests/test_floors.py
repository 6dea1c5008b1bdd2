"""The floors contract covers the whole tree: every top-level package, and every child of
the two packages that hold several floors (`controller`, `gpuflow`), sits in one layer of
pyproject.toml's `layers` contract, so that no new module escapes the import order.
lint-imports checks the order itself; this checks that nothing is left out of it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPLIT = ("controller", "gpuflow")  # packages whose children sit on different floors


def _floors() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["type"] == "layers" and "containers" not in c]
    return [{m.strip() for m in layer.split("|")} for layer in contract["layers"]]


def _children(package: str) -> set[str]:
    folder = ROOT / package
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in folder.glob("*/__init__.py")}
    return {f"{package}.{name}" for name in modules | packages}


def test_every_package_and_every_child_of_a_split_package_is_on_one_floor() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = [m for layer in _floors() for m in layer]
    assert len(named) == len(set(named)), "a module is on two floors"
    expected = {p for p in config["root_packages"] if p not in SPLIT}
    for package in SPLIT:
        expected |= _children(package)
    assert len(expected) > 30
    assert expected - set(named) == set(), "not on any floor"
    assert set(named) - expected == set(), "on a floor but not in the tree"


def test_the_policies_stand_on_the_model_alone() -> None:
    floors = _floors()
    order = {m: i for i, layer in enumerate(floors) for m in layer}
    assert order["policies"] == order["controller.model"] - 1
    assert floors[-1] >= {"controller.model"}
    assert order["gpuflow.cli"] == 0
