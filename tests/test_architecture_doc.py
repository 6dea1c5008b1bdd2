"""docs/architecture.md stays the map of the code: every path it names exists (read
from the repository root or from the folder its section is about), every top-level
package has its section, and every sub-package is named (issue 29)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("controller", "policies", "gpuflow", "operators", "api", "experiments", "web")
# A path in backticks; placeholders (NAME.py, NNNN_*.py, PAGE.js) are upper case or globs.
PATH = re.compile(r"`([a-z0-9_./-]+/[a-z0-9_./-]*)`")


def named_paths() -> list[tuple[str, tuple[Path, ...]]]:
    """Each path the page names, with the folders it may be relative to."""
    found = []
    bases: tuple[Path, ...] = (ROOT,)
    for line in DOC.read_text().splitlines():
        if line.startswith("#"):
            heading = [ROOT / p for p in re.findall(r"`([a-z0-9_./-]+/)`", line)]
            bases = (ROOT, *heading)
        found += [(path, bases) for path in PATH.findall(line)]
    return found


def test_every_path_the_map_names_exists() -> None:
    paths = named_paths()
    assert len(paths) > 50
    missing = [p for p, bases in paths if not any((base / p).exists() for base in bases)]
    assert not missing, missing


def test_every_package_has_its_section_and_every_sub_package_is_named() -> None:
    text = DOC.read_text()
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    for package in PACKAGES:
        assert any(f"`{package}/" in h for h in headings), package
    sub_packages = sorted(
        init.parent.relative_to(ROOT)
        for package in PACKAGES
        for init in (ROOT / package).glob("*/__init__.py")
    )
    assert len(sub_packages) > 10
    unnamed = [str(p) for p in sub_packages if f"`{p.name}/`" not in text and f"{p}/" not in text]
    assert not unnamed, unnamed
