"""Module docstrings say what a module is and who calls it, never what it will be: a
docstring that promises the future ("will", "later", "not yet") goes stale the day the
promise is kept or dropped (issue 29). Reads every module of the project's packages.

"later" is also the comparative of late ("a later version", "later jobs", "one second
later"): those uses pass; "later" standing for "in some future version" does not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ("controller", "policies", "gpuflow", "operators", "api", "experiments")

# The words that promise: a modal "will", "not yet", "yet to", "(later)".
PROMISE = re.compile(r"\bwill\b|\bnot yet\b|\byet to\b|\blater\b", re.IGNORECASE)
# "later" as an adjective or an adverb of time inside the program's run: after an
# article or a quantifier, before the noun it qualifies, or after a duration.
LATER_OF_TIME = re.compile(
    r"\b(?:a|an|the|any|no|by|for|and|or|again)\s+later\b"
    r"|\blater\s+(?:jobs?|ones?|parts?|time|change|version|start|sandbox)\b"
    r"|\b(?:s\)|seconds?|minutes?)\s+later\b",
    re.IGNORECASE,
)


def promises(docstring: str) -> list[str]:
    """The lines of `docstring` that promise the future."""
    found = []
    for line in docstring.splitlines():
        text = LATER_OF_TIME.sub("", line)
        if PROMISE.search(text):
            found.append(line.strip())
    return found


def modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def test_the_check_tells_a_promise_from_a_time() -> None:
    assert promises("A backend (the simulator, later Kubernetes) builds it.")
    assert promises("The operator (later) makes policies here.")
    assert promises("Shares are not yet read by the placers.")
    assert promises("This module will call the reaper.")
    assert not promises("Later jobs that fit may start; any later version stops.")
    assert not promises("It is retried one second later, then woken (5 s) later.")
    assert not promises("A saved replay can be summarised again later.")


def test_the_packages_are_read() -> None:
    paths = modules()
    assert len(paths) > 300
    assert ROOT / "controller" / "loop.py" in paths
    assert ROOT / "experiments" / "coflow" / "replay.py" in paths


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_docstring_promises_the_future(package: str) -> None:
    stale = []
    for path in modules():
        if path.relative_to(ROOT).parts[0] != package:
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text(), str(path)), clean=False)
        stale += [f"{path.relative_to(ROOT)}: {line}" for line in promises(docstring or "")]
    assert not stale, "module docstrings promising the future:\n" + "\n".join(stale)
