"""Every loader refuses numbers that are not finite (NaN, inf, 1e309, huge integers).

Such a number in a job's times or demand would make a replay loop forever or crash
later with a traceback; the loader must stop at the record with its one-line error
naming the file, the line and the field.
"""

from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from controller.traces.formats.alibaba import OPENB_POD_COLUMNS
from tests.controller.traces.builders import write

HUGE_INT = "9" * 5000  # over Python's 4300-digit int/str conversion limit
BIG_INT = "9" * 400  # under that limit, but beyond a float: float() overflows

HELIOS = "job_id,user,vc,gpu_num,submit_time,start_time,end_time"
OPENB = ",".join(OPENB_POD_COLUMNS)
TIRESIAS = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
ADAPTDL = "name,time,application,num_replicas,batch_size"
CANONICAL = "job_id,submit_s,num_gpus,duration_s"
PHILLY_CSV = "timestamp,duration,num_gpus,gpu_time,cluster"
GAVEL_OK = "LM (batch size 5)\tcmd\tdir\t--steps\t1\t100\t1\t1\t-1\t0\n"
PHILLY_OK = (
    '{"jobid": "ok", "vc": "v", "user": "u", "submitted_time": 0, "attempts":'
    ' [{"start_time": 1, "end_time": 9, "detail": [{"ip": "m", "gpus": ["g0"]}]}]}'
)


def _philly(submitted: str = "0", start: str = "1", end: str = "9") -> str:
    """A philly-json log whose second job (on line 3) has these raw JSON times."""
    job = (
        f'{{"jobid": "bad", "submitted_time": {submitted}, "attempts":'
        f' [{{"start_time": {start}, "end_time": {end},'
        ' "detail": [{"ip": "m", "gpus": ["g0"]}]}]}'
    )
    return f"[\n{PHILLY_OK},\n{job}\n]\n"


# (format, file name, contents, line, field)
CASES = [
    ("philly-json", "l.json", _philly(submitted="NaN"), 3, "submitted_time"),
    ("philly-json", "l.json", _philly(submitted="-Infinity"), 3, "submitted_time"),
    ("philly-json", "l.json", _philly(submitted="1e309"), 3, "submitted_time"),
    ("philly-json", "l.json", _philly(submitted=HUGE_INT), 3, "submitted_time"),
    ("philly-json", "l.json", _philly(submitted=BIG_INT), 3, "submitted_time"),
    ("philly-json", "l.json", _philly(start="Infinity"), 3, "attempts[0].start_time"),
    ("philly-json", "l.json", _philly(end="NaN"), 3, "attempts[0].end_time"),
    ("philly-json", "l.json", _philly(start="-1e308", end="1e308"), 3, "attempts[0].end_time"),
    ("philly-csv", "p.csv", f"{PHILLY_CSV}\n0,10,1,1,c\nnan,10,1,1,c\n", 3, "timestamp"),
    ("philly-csv", "p.csv", f"{PHILLY_CSV}\n0,1e309,1,1,c\n", 2, "duration"),
    ("philly-csv", "p.csv", f"{PHILLY_CSV}\n0,10,{HUGE_INT},1,c\n", 2, "num_gpus"),
    ("gpuflow", "a.csv", f"{CANONICAL}\na,inf,1,5\n", 2, "submit_s"),
    ("gpuflow", "a.csv", f"{CANONICAL}\na,0,1,{HUGE_INT}\n", 2, "duration_s"),
    ("adaptdl", "w.csv", f"{ADAPTDL}\nx,1e309,ncf,1,8\n", 2, "time"),
    ("adaptdl", "w.csv", f"{ADAPTDL}\nx,0,ncf,{HUGE_INT},8\n", 2, "num_replicas"),
    ("tiresias", "t.csv", f"{TIRESIAS}\n0,1,0,5,vgg,NaN,0\n", 2, "duration"),
    ("tiresias", "t.csv", f"{TIRESIAS}\n0,{HUGE_INT},0,5,vgg,10,0\n", 2, "num_gpu"),
    (
        "gavel",
        "g.trace",
        GAVEL_OK + "LM\tcmd\tdir\t--steps\t1\tinf\t1\t1\t-1\t0\n",
        2,
        "total_steps",
    ),
    (
        "gavel",
        "g.trace",
        GAVEL_OK + f"LM (batch size {HUGE_INT})\tcmd\tdir\t--steps\t1\t100\t1\t1\t-1\t0\n",
        2,
        "job_type",
    ),
    ("helios", "h.csv", f"{HELIOS}\nj,u,v,1,0,-1e308,1e308\n", 2, "end_time"),
    ("helios", "h.csv", f"{HELIOS}\nj,u,v,1,1e999,0,10\n", 2, "submit_time"),
    # inst_num * plan_gpu overflows to infinity
    ("alibaba-pai", "t.csv", "j,w,1e300,Terminated,0,10,600,29,1e300,\n", 1, "plan_gpu"),
    # each task's demand is finite, their sum is not
    (
        "alibaba-pai",
        "t.csv",
        "j,w,1e300,Terminated,0,10,600,29,1e8,\nj,v,1e300,Terminated,0,10,600,29,1e8,\n",
        2,
        "plan_gpu",
    ),
    ("alibaba-pai", "t.csv", "j,w,1,Terminated,-1e308,1e308,600,29,100,\n", 1, "end_time"),
    ("alibaba-pai", "t.csv", "j,w,1,Terminated,0,NaN,600,29,100,\n", 1, "end_time"),
    (
        "alibaba-openb",
        "o.csv",
        f"{OPENB}\np,1,1,1,1000,,LS,Running,0,1e308,-1e308\n",
        2,
        "deletion_time",
    ),
    (
        "alibaba-openb",
        "o.csv",
        f"{OPENB}\np,1,1,1,1000,,LS,Running,-inf,10,1\n",
        2,
        "creation_time",
    ),
]


@pytest.mark.parametrize(
    ("fmt", "name", "text", "line", "field"),
    CASES,
    ids=[f"{case[0]}-{case[4]}-{i}" for i, case in enumerate(CASES)],
)
def test_non_finite_number_names_line_and_field(
    tmp_path: Path, fmt: str, name: str, text: str, line: int, field: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError) as caught:
        load_trace(path, fmt)
    error = caught.value
    assert (error.line, error.field) == (line, field)
    message = str(error)
    assert message.startswith(f"{path}:{line}: field '{field}': ")
    assert "\n" not in message
    assert len(message) < 300  # the huge number is not echoed back


def test_deeply_nested_philly_json_is_a_trace_error(tmp_path: Path) -> None:
    path = write(tmp_path, "l.json", f"[\n{PHILLY_OK},\n" + "[" * 100_000 + "]" * 100_000 + "\n]\n")
    with pytest.raises(TraceError, match="nested too deeply") as caught:
        load_trace(path, "philly-json")
    assert caught.value.line == 3


def test_finite_philly_json_numbers_still_load(tmp_path: Path) -> None:
    path = write(tmp_path, "l.json", _philly(submitted="12345678901234567890", end="1.5e1"))
    trace = load_trace(path, "philly-json")
    assert [job.job_id for job in trace.jobs] == ["ok", "bad"]
    assert trace.jobs[1].submit_s == pytest.approx(12345678901234567890.0)
