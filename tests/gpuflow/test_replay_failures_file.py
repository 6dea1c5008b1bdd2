"""`gpuflow replay --failures FILE` on bad files (controller.failures): each is exit 2
with one line naming the file, line and field, never a traceback; a UTF-8 byte-order
mark is read past."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import failures
from controller.failures import FailureScheduleError, load_failures
from controller.sim import NodeEvent
from controller.spec import named_cluster
from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
from gpuflow.cli import main

HEADER = "time_s,node,event\n"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    write_canonical(path, generate(10, seed=5, cluster_gpus=16, load=1.2))
    return path


def _replay(trace: Path, schedule: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["replay", str(trace), "-p", "fifo", "-c", "4x4", "--failures", str(schedule)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "line", "field", "message"),
    [
        # byte 10 is a newline, byte 128 the first that is not UTF-8.
        (bytes(range(256)) * 8, 2, "file", "not UTF-8 text: invalid start byte"),
        # Latin-1 "é" in the third row's node name.
        (b"time_s,node,event\n1,node-0,down\n2,n\xe9ud,up\n", 3, "file", "not UTF-8 text"),
        (f"{HEADER}1,node-0,down\ninf,node-0,up\n".encode(), 3, "time_s", "must be a finite"),
        (f"{HEADER}nan,node-0,down\n".encode(), 2, "time_s", "must be a finite"),
        (f"{HEADER}-1,node-0,down\n".encode(), 2, "time_s", "must be a finite number >= 0"),
        (f"{HEADER}1e400,node-0,down\n".encode(), 2, "time_s", "must be a finite"),
        (f"{HEADER}x,node-0,down\n".encode(), 2, "time_s", "not a number"),
        (f"{HEADER}1,node-99,down\n".encode(), 2, "node", "no node 'node-99'"),
        (f"{HEADER}1,node-0,explode\n".encode(), 2, "event", "must be one of 'down'"),
        (b"time_s,node\n1,node-0\n", 1, "event", "missing column"),
    ],
)
def test_a_bad_failures_file_is_one_line_naming_file_line_and_field(
    tmp_path: Path,
    trace: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    line: int,
    field: str,
    message: str,
) -> None:
    schedule = tmp_path / "failures.csv"
    schedule.write_bytes(content)
    code, err = _replay(trace, schedule, capsys)
    assert code == 2
    assert err.startswith(f"gpuflow: error: {schedule}:{line}: field '{field}': {message}")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    schedule = tmp_path / "failures.csv"
    schedule.write_bytes(b"\xef\xbb\xbf" + f"{HEADER}100,node-1,down\n50,node-0,up\n".encode())
    events = load_failures(schedule, named_cluster("4x4"))
    assert events == (NodeEvent(50.0, "node-0", True), NodeEvent(100.0, "node-1", False))


def test_rows_and_size_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = named_cluster("4x4")
    schedule = tmp_path / "failures.csv"
    schedule.write_text(HEADER + "".join(f"{i},node-0,down\n" for i in range(4)))
    monkeypatch.setattr(failures, "MAX_ROWS", 3)
    with pytest.raises(FailureScheduleError) as rows:
        load_failures(schedule, cluster)
    assert str(rows.value) == f"{schedule}:5: field 'file': more than 3 rows"
    monkeypatch.setattr(failures, "MAX_ROWS", 4)
    assert len(load_failures(schedule, cluster)) == 4  # the bound itself is allowed
    monkeypatch.setattr(failures, "MAX_FILE_BYTES", schedule.stat().st_size - 1)
    with pytest.raises(FailureScheduleError) as size:
        load_failures(schedule, cluster)
    limit = schedule.stat().st_size - 1
    assert str(size.value) == f"{schedule}:1: field 'file': larger than {limit} bytes"


def test_the_row_bound_covers_a_million_row_file(tmp_path: Path) -> None:
    schedule = tmp_path / "failures.csv"
    rows = failures.MAX_ROWS + 1
    schedule.write_text(HEADER + "1,node-0,down\n" * rows)
    assert schedule.stat().st_size <= failures.MAX_FILE_BYTES  # refused for its rows
    with pytest.raises(FailureScheduleError) as caught:
        load_failures(schedule, named_cluster("4x4"))
    assert str(caught.value).endswith(f":{rows + 1}: field 'file': more than {rows - 1} rows")


@pytest.mark.parametrize(
    ("value", "words"),
    [("5e-324", "must be 0 or >= 0.001"), ("1e7", "<= 1e+06"), ("inf", "not a finite number")],
)
def test_replay_interval_is_zero_or_in_range(
    trace: Path, capsys: pytest.CaptureFixture[str], value: str, words: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["replay", str(trace), "-p", "fifo", "-c", "4x4", f"--interval={value}"])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --interval" in err and words in err, err
