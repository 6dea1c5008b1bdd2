"""The example traces shipped in examples/traces load cleanly."""

from pathlib import Path

import pytest

from controller.traces import load_trace

EXAMPLES = sorted((Path(__file__).parents[3] / "examples" / "traces").iterdir())


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_loads(path: Path) -> None:
    trace = load_trace(path)
    assert trace.jobs and trace.jobs[0].submit_s == 0.0
