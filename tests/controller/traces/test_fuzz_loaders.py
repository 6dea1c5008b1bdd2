"""Fuzzing every trace loader: whatever the file holds, `load_trace` returns a trace or
raises `TraceError` with a one-line message, never another exception.

Files are built from each format's own columns (so that rows reach the field parsers)
filled with hostile cells: huge and non-finite numbers, integers of thousands of
digits, negative counts, dates, quotes, control characters; Philly JSON from nested
values of the same kind; and raw bytes through format detection. Bounded in time:
`MAX_EXAMPLES` per test and a deadline per example, under a minute in all on CI.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.traces import FORMATS, TraceError, load_trace
from controller.traces.formats import adaptdl, alibaba, canonical, elasticflow, gavel, philly

MAX_EXAMPLES = 100
# Per example: a file of at most a few dozen rows loads in milliseconds; the slack is
# for a loaded 2-core CI machine.
DEADLINE_MS = 2000
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=DEADLINE_MS,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# The columns each delimited format reads (header, or width for the headerless ones).
HEADERS: dict[str, tuple[str, ...]] = {
    canonical.FORMAT: canonical.COLUMNS,
    philly.CSV_FORMAT: ("timestamp", "duration", "num_gpus", "gpu_time", "cluster"),
    adaptdl.FORMAT: adaptdl.COLUMNS,
    elasticflow.FORMAT: elasticflow.COLUMNS,
    "tiresias": ("job_id", "num_gpu", "submit_time", "duration", "iterations", "model_name"),
    "helios": ("job_id", "gpu_num", "submit_time", "duration", "end_time", "vc", "user"),
    alibaba.OPENB_FORMAT: alibaba.OPENB_POD_COLUMNS,
    alibaba.PAI_FORMAT: alibaba.PAI_TASK_COLUMNS,
}

HOSTILE_CELLS = st.sampled_from(
    [
        "",
        "0",
        "1",
        "-1",
        "4",
        "0.5",
        "nan",
        "NaN",
        "inf",
        "-Infinity",
        "1e309",
        "-1e309",
        "1e308",
        "9" * 5000,
        "9" * 400,
        "-" + "9" * 30,
        "1.5e-320",
        "2019-10-03 12:00:00",
        "2019-13-45 99:99:99",
        "None",
        "LS",
        "Terminated",
        '"',
        "a,b",
        "\x00",
        "é",
        "resnet50 (batch size 64)",
        "resnet50 (batch size " + "9" * 50 + ")",
    ]
)
# Mostly plausible values, so that rows reach the later checks (and some load).
PLAUSIBLE_CELLS = st.one_of(
    st.integers(min_value=0, max_value=200).map(str),
    st.floats(min_value=0, max_value=1e6).map(repr),
    st.sampled_from(["100", "25", "resnet50 (batch size 64)", "cifar10", "vc1", "LS"]),
)
CELLS = st.one_of(
    PLAUSIBLE_CELLS,
    PLAUSIBLE_CELLS,
    PLAUSIBLE_CELLS,
    HOSTILE_CELLS,
    st.text(max_size=12),
    st.integers().map(str),
)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    # A module-wide folder: hypothesis runs many examples in one test call.
    with tempfile.TemporaryDirectory(prefix="gpuflow-fuzz-") as name:
        yield Path(name)


def _loads_or_one_line_error(path: Path, fmt: str | None) -> None:
    try:
        trace = load_trace(path, fmt)
    except TraceError as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1, message
        assert len(message) < 1000, message[:200]
        return
    assert trace.jobs  # a loaded trace holds at least one job, all of them finite
    assert trace.jobs[0].submit_s == 0


def _csv_line(cells: list[str], delimiter: str) -> str:
    # No quoting: fuzzed quotes and delimiters inside cells are part of the test.
    return delimiter.join(cells)


@st.composite
def delimited_file(draw: st.DrawFn, fmt: str) -> str:
    if fmt == gavel.FORMAT:
        width = draw(st.sampled_from(sorted(gavel.LAYOUTS)))
        rows = draw(st.lists(st.lists(CELLS, min_size=width, max_size=width), max_size=8))
        return "\n".join(_csv_line(row, "\t") for row in rows) + "\n"
    columns = list(HEADERS[fmt])
    if draw(st.booleans()):
        columns = draw(st.permutations(columns))
    width = len(columns)
    row = st.one_of(
        st.lists(CELLS, min_size=width, max_size=width),
        st.lists(CELLS, min_size=width, max_size=width),
        st.lists(CELLS, min_size=width - 1, max_size=width + 1),
    )
    rows = draw(st.lists(row, min_size=1, max_size=8))
    header = [] if fmt == alibaba.PAI_FORMAT and draw(st.booleans()) else [_csv_line(columns, ",")]
    return "\n".join([*header, *(_csv_line(row, ",") for row in rows)]) + "\n"


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    HOSTILE_CELLS,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)


@st.composite
def philly_record(draw: st.DrawFn) -> object:
    times = st.one_of(JSON_SCALARS, st.just("2017-10-03 12:00:00"))
    gpus = st.lists(st.text(max_size=3), max_size=4)
    attempt = st.fixed_dictionaries(
        {
            "start_time": times,
            "end_time": times,
            "detail": st.one_of(
                JSON_VALUES, st.lists(st.fixed_dictionaries({"ip": st.text(), "gpus": gpus}))
            ),
        }
    )
    record = st.fixed_dictionaries(
        {
            "jobid": st.one_of(st.text(max_size=8), JSON_SCALARS),
            "submitted_time": times,
            "attempts": st.one_of(st.lists(attempt, max_size=3), JSON_VALUES),
            "vc": st.one_of(st.text(max_size=4), JSON_SCALARS),
        }
    )
    return draw(st.one_of(record, JSON_VALUES))


DELIMITED = sorted(set(FORMATS) - {philly.JSON_FORMAT})


def test_every_format_is_fuzzed() -> None:
    assert set(DELIMITED) == set(HEADERS) | {gavel.FORMAT}


@pytest.mark.parametrize("fmt", DELIMITED)
def test_delimited_loaders_raise_nothing_but_trace_errors(workdir: Path, fmt: str) -> None:
    path = workdir / f"{fmt}.csv"

    @FUZZ
    @given(text=delimited_file(fmt), detect=st.booleans())
    def check(text: str, detect: bool) -> None:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        _loads_or_one_line_error(path, None if detect else fmt)

    check()


def test_philly_json_loader_raises_nothing_but_trace_errors(workdir: Path) -> None:
    path = workdir / "log.json"

    @FUZZ
    @given(records=st.lists(philly_record(), max_size=5), raw_tail=st.text(max_size=4))
    def check(records: list[object], raw_tail: str) -> None:
        body = json.dumps(records, allow_nan=True)
        path.write_text(body + raw_tail, encoding="utf-8", errors="surrogatepass")
        _loads_or_one_line_error(path, philly.JSON_FORMAT)

    check()


def test_raw_bytes_through_detection_raise_nothing_but_trace_errors(workdir: Path) -> None:
    path = workdir / "trace"

    @FUZZ
    @given(data=st.binary(max_size=512), fmt=st.sampled_from([None, *sorted(FORMATS)]))
    def check(data: bytes, fmt: str | None) -> None:
        path.write_bytes(data)
        _loads_or_one_line_error(path, fmt)

    check()


def test_a_long_duplicate_id_is_a_short_line(workdir: Path) -> None:
    # Found by the fuzzer: the duplicate-id error echoed a 5,000-digit job name whole.
    name = "9" * 5000
    path = workdir / "dup.csv"
    rows = [f"{name},{t},cifar10,1,128" for t in (1, 2)]
    path.write_text("\n".join([",".join(adaptdl.COLUMNS), *rows]) + "\n")
    with pytest.raises(
        TraceError, match=r"duplicate job id '9{40}'\.\.\. \(5000 characters\)"
    ) as caught:
        load_trace(path, adaptdl.FORMAT)
    assert len(str(caught.value)) < 1000


def test_a_job_id_with_line_breaks_is_one_line(workdir: Path) -> None:
    path = workdir / "breaks.csv"
    path.write_text('job_id,submit_s,num_gpus,duration_s\n"a\nb\u2028c",0,0,10\n')
    with pytest.raises(TraceError) as caught:
        load_trace(path, canonical.FORMAT)
    assert len(str(caught.value).splitlines()) == 1
