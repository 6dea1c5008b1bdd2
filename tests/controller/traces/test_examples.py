"""The example traces shipped in examples/traces load cleanly."""

from pathlib import Path

import pytest

from controller.traces import load_trace

FOLDER = Path(__file__).parents[3] / "examples" / "traces"
EXAMPLES = sorted(p for p in FOLDER.rglob("*") if p.is_file() and p.suffix != ".md")


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(path.relative_to(FOLDER)) for path in EXAMPLES])
def test_example_loads(path: Path) -> None:
    trace = load_trace(path)
    assert trace.jobs and trace.jobs[0].submit_s == 0.0


def test_the_pollux_workloads_are_the_papers_eight_of_160_jobs() -> None:
    for number in range(1, 9):
        trace = load_trace(FOLDER / "pollux" / f"workload-{number}.csv")
        assert trace.fmt == "adaptdl"
        assert len(trace.jobs) == 160
        assert {job.model for job in trace.jobs} <= {
            "bert",
            "cifar10",
            "deepspeech2",
            "imagenet",
            "ncf",
            "yolov3",
        }
