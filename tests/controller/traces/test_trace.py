from controller.traces import FORMATS, TraceError, UnknownFormatError


def test_trace_error_names_file_line_and_field() -> None:
    error = TraceError("jobs.csv", 7, "num_gpus", "not a number: 'x'")
    assert str(error) == "jobs.csv:7: field 'num_gpus': not a number: 'x'"
    assert (error.path, error.line, error.field) == ("jobs.csv", 7, "num_gpus")
    assert isinstance(error, ValueError)


def test_trace_error_omits_parts_that_are_none() -> None:
    assert str(TraceError("a.csv", None, "f", "bad")) == "a.csv: field 'f': bad"
    assert str(TraceError("a.csv", 3, None, "bad")) == "a.csv:3: bad"
    assert str(TraceError("a.csv", None, None, "bad")) == "a.csv: bad"


def test_unknown_format_error_lists_every_known_format() -> None:
    error = UnknownFormatError("x.csv", "cannot tell", list(FORMATS))
    assert isinstance(error, TraceError)
    assert error.line is None and error.field is None
    for name in FORMATS:
        assert name in str(error)
    assert "--format" in str(error)
