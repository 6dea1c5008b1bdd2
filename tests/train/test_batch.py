import os
from pathlib import Path

import pytest

from gpuflow.train.batch import (
    ANN_BATCH_SIZE,
    BatchWatcher,
    parse_annotations,
    scaled_lr,
    split_batch,
)
from operators import crd


def test_the_annotation_is_the_one_the_operator_writes() -> None:
    assert ANN_BATCH_SIZE == crd.ANN_BATCH_SIZE


def test_parses_the_downward_api_rendering_with_go_quoting() -> None:
    text = (
        'gpuflow.dev/batch-size="512"\n'
        'kubectl.kubernetes.io/last-applied-configuration="{\\"a\\":\\"b\\\\n\\"}\\n"\n'
        'note="tab\\there \\u00e9 \\x41"\n'
        "garbage line\n"
    )
    got = parse_annotations(text)
    assert got[ANN_BATCH_SIZE] == "512"
    assert got["kubectl.kubernetes.io/last-applied-configuration"] == '{"a":"b\\n"}\n'
    assert got["note"] == "tab\there é A"
    assert len(got) == 3


@pytest.mark.parametrize(
    ("batch", "replicas", "local", "global_batch"),
    [(512, 2, 256, 512), (100, 3, 33, 99), (2, 4, 1, 4), (64, 1, 64, 64)],
)
def test_split_is_equal_per_replica(
    batch: int, replicas: int, local: int, global_batch: int
) -> None:
    split = split_batch(batch, replicas)
    assert (split.local, split.global_batch) == (local, global_batch)


def test_square_root_rule() -> None:
    assert scaled_lr(0.1, 64, 256) == pytest.approx(0.2)
    assert scaled_lr(0.1, 64, 16) == pytest.approx(0.05)
    assert scaled_lr(0.1, 64, 64) == 0.1


def test_watcher_reads_on_change_only_and_not_more_often_than_its_interval(tmp_path: Path) -> None:
    f = tmp_path / "annotations"
    f.write_text(f'{ANN_BATCH_SIZE}="128"\n')
    w = BatchWatcher(f, min_interval_s=1.0)
    assert w.poll(now=0.0) == 128
    assert w.poll(now=5.0) is None  # unchanged file
    f.write_text(f'{ANN_BATCH_SIZE}="256"\n')
    os.utime(f, ns=(1, 10**18))
    assert w.poll(now=5.5) is None  # within the interval
    assert w.poll(now=6.0) == 256
    f.write_text(f'{ANN_BATCH_SIZE}="lots"\n')
    os.utime(f, ns=(1, 2 * 10**18))
    assert w.poll(now=7.0) is None  # malformed: ignored
    assert BatchWatcher(tmp_path / "absent").poll(now=0.0) is None
    assert BatchWatcher(None).poll() is None
