from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from controller.traces.formats.gavel import parse_job_type
from tests.controller.traces.builders import write

TEN_COLUMNS = (
    "ResNet-50 (batch size 64)\tpython3 main.py -a resnet50 -b 64 %s/imagenet\t"
    "image_classification/imagenet\t--num_minibatches\t1\t7931\t2\t1\t-1.000000\t12.5\n"
    "A3C\tpython3 main.py --env PongDeterministic-v4\trl\t--max_steps\t0\t8857\t1\t1\t-1.0\t0\n"
)
SEVEN_COLUMNS = (
    'Transformer (batch size 128)\tcd %s && python3 train.py -data "x y"\t-step\t1\t95121\t0.0\t1\n'
    "LM (batch size 10)\tcd %s && python main.py --batch_size 10\t--steps\t1\t2388099\t11.0\t4\n"
)


def test_ten_column_trace(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "jobs.trace", TEN_COLUMNS))
    assert trace.fmt == "gavel"
    a3c, resnet = trace.jobs
    assert (a3c.job_id, a3c.model, a3c.batch_size, a3c.num_gpus, a3c.iterations) == (
        "gavel-1",
        "A3C",
        None,
        1,
        8857.0,
    )
    assert (resnet.job_id, resnet.submit_s, resnet.model, resnet.batch_size) == (
        "gavel-0",
        12.5,
        "ResNet-50",
        64,
    )
    assert (resnet.num_gpus, resnet.iterations, resnet.duration_s) == (2, 7931.0, None)


def test_old_seven_column_trace(tmp_path: Path) -> None:
    transformer, lm = load_trace(write(tmp_path, "msr.trace", SEVEN_COLUMNS)).jobs
    assert (transformer.model, transformer.batch_size, transformer.num_gpus) == (
        "Transformer",
        128,
        1,
    )
    assert transformer.iterations == 95121.0
    assert (lm.submit_s, lm.num_gpus, lm.iterations) == (11.0, 4, 2388099.0)


def test_nine_and_six_column_traces(tmp_path: Path) -> None:
    nine = "LM (batch size 5)\tcmd\t--steps\t1\t100\t2\t1\t-1\t3.0\n"
    six = "LM (batch size 5)\tcmd\t--steps\t100\t3\t2\n"
    for name, text in (("nine.trace", nine), ("six.trace", six)):
        (job,) = load_trace(write(tmp_path, name, text)).jobs
        assert (job.model, job.batch_size, job.num_gpus, job.iterations) == ("LM", 5, 2, 100.0)


def test_wrong_width_is_reported_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.trace", TEN_COLUMNS + "LM\tcmd\t3\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (3, None)
    assert "6 or 7 or 9 or 10" in str(caught.value)


def test_parse_job_type() -> None:
    assert parse_job_type("ResNet-18 (batch size 64)") == ("ResNet-18", 64)
    assert parse_job_type("Recommendation (batch size 8192)") == ("Recommendation", 8192)
    assert parse_job_type("CycleGAN") == ("CycleGAN", None)
