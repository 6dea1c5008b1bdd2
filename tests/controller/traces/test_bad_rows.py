"""Every format reports a bad record with the file, the line and the field at fault."""

from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from controller.traces.formats.alibaba import OPENB_POD_COLUMNS
from tests.controller.traces.builders import philly_attempt, philly_job, write, write_philly_json

HELIOS = (
    "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration"
)
OPENB = ",".join(OPENB_POD_COLUMNS)
TIRESIAS = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
GAVEL_OK = "LM (batch size 5)\tcmd\tdir\t--steps\t1\t100\t1\t1\t-1\t0\n"

# (format, file name, contents, line, field)
CASES = [
    (
        "gpuflow",
        "a.csv",
        "job_id,submit_s,num_gpus,duration_s\na,0,1,5\nb,0,two,5\n",
        3,
        "num_gpus",
    ),
    ("gpuflow", "a.csv", "job_id,submit_s,num_gpus,duration_s\na,0,1,-5\n", 2, "duration_s"),
    ("gpuflow", "a.csv", "job_id,num_gpus,duration_s\na,1,5\n", 1, "submit_s"),
    ("gpuflow", "a.csv", "job_id,submit_s,num_gpus,duration_s\na,0,1\n", 2, None),
    (
        "gpuflow",
        "a.csv",
        "job_id,submit_s,num_gpus,duration_s,precision\na,0,1,5,bf16\nb,0,1,5,int8\n",
        3,
        "precision",
    ),
    (
        "philly-csv",
        "p.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n0,10,x,1,c\n",
        2,
        "num_gpus",
    ),
    (
        "philly-csv",
        "p.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n0,-10,1,1,c\n",
        2,
        "duration",
    ),
    ("philly-csv", "p.csv", "timestamp,num_gpus,gpu_time,cluster\n0,1,1,c\n", 1, "duration"),
    (
        "philly-csv",
        "p.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\nlater,10,1,1,c\n",
        2,
        "timestamp",
    ),
    (
        "adaptdl",
        "w.csv",
        "name,time,application,num_replicas,batch_size\nx,0,ncf,many,8\n",
        2,
        "num_replicas",
    ),
    (
        "adaptdl",
        "w.csv",
        "name,time,application,num_replicas,batch_size\nx,-3,ncf,1,8\n",
        2,
        "time",
    ),
    ("adaptdl", "w.csv", "name,time,num_replicas,batch_size\nx,0,1,8\n", 1, "application"),
    ("tiresias", "t.csv", f"{TIRESIAS}\n0,1,0,5,vgg,10,0\n1,1.5,0,5,vgg,10,0\n", 3, "num_gpu"),
    ("tiresias", "t.csv", f"{TIRESIAS}\n0,1,0,5,vgg,-10,0\n", 2, "duration"),
    (
        "tiresias",
        "t.csv",
        "job_id,submit_time,iterations,model_name,duration\n0,0,5,vgg,10\n",
        1,
        "num_gpu",
    ),
    (
        "gavel",
        "g.trace",
        GAVEL_OK + "LM\tcmd\tdir\t--steps\t1\t100\tfour\t1\t-1\t0\n",
        2,
        "scale_factor",
    ),
    (
        "gavel",
        "g.trace",
        GAVEL_OK + "LM\tcmd\tdir\t--steps\t1\t100\t1\t1\t-1\t-7\n",
        2,
        "arrival_time",
    ),
    ("gavel", "g.trace", "LM\tcmd\t--steps\t1\tlots\t0\t1\n", 1, "total_steps"),
    (
        "helios",
        "h.csv",
        f"{HELIOS}\nj,u,v,n,x,1,1,COMPLETED,2020-04-01 00:00:00,,,60\n",
        2,
        "gpu_num",
    ),
    (
        "helios",
        "h.csv",
        f"{HELIOS}\nj,u,v,n,1,1,1,COMPLETED,2020-04-01 00:00:00,,,-60\n",
        2,
        "duration",
    ),
    ("helios", "h.csv", "job_id,user,vc,gpu_num,duration\nj,u,v,1,60\n", 1, "submit_time"),
    # An empty id cell (Row.required_text), in two formats.
    ("helios", "h.csv", f"{HELIOS}\n,u,v,j,1,1,1,COMPLETED,0,0,60,60\n", 2, "job_id"),
    (
        "tiresias",
        "t.csv",
        f"{TIRESIAS}\nj1,1,0,100,resnet50,60,1\n ,1,0,100,bert,60,1\n",
        3,
        "job_id",
    ),
    (
        "alibaba-pai",
        "t.csv",
        "j,w,1.0,Terminated,0,10,600,29,100,\nk,w,1.0,Terminated,0,10,600,29,half,\n",
        2,
        "plan_gpu",
    ),
    ("alibaba-pai", "t.csv", "j,w,1.0,Terminated,50,10,600,29,100,\n", 1, "end_time"),
    ("alibaba-pai", "t.csv", "j,w,1.0,Terminated,0,10,600\n", 1, None),
    ("alibaba-openb", "o.csv", f"{OPENB}\np,1,1,one,1000,,LS,Running,0,10,1\n", 2, "num_gpu"),
    ("alibaba-openb", "o.csv", f"{OPENB}\np,1,1,1,1000,,LS,Running,0,10,20\n", 2, "deletion_time"),
    ("alibaba-openb", "o.csv", "name,num_gpu,creation_time\np,1,0\n", 1, "gpu_milli"),
]


@pytest.mark.parametrize(
    ("fmt", "name", "text", "line", "field"),
    CASES,
    ids=[f"{case[0]}-{case[4]}-{i}" for i, case in enumerate(CASES)],
)
def test_bad_record_names_line_and_field(
    tmp_path: Path, fmt: str, name: str, text: str, line: int, field: str | None
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError) as caught:
        load_trace(path, fmt)
    error = caught.value
    assert (error.line, error.field) == (line, field)
    assert str(error).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"vc": "v"}, "jobid"),
        (
            philly_job(
                "a", "not a date", philly_attempt("2017-10-07 00:00:01", "2017-10-07 00:00:09", 1)
            ),
            "submitted_time",
        ),
        (
            philly_job(
                "a", "2017-10-07 00:00:00", philly_attempt("soon", "2017-10-07 00:00:09", 1)
            ),
            "attempts[0].start_time",
        ),
        ({**philly_job("a", "2017-10-07 00:00:00"), "attempts": "many"}, "attempts"),
    ],
)
def test_bad_philly_json_job_names_line_and_key(
    tmp_path: Path, record: dict[str, object], field: str
) -> None:
    good = philly_job(
        "ok", "2017-10-07 00:00:00", philly_attempt("2017-10-07 00:00:01", "2017-10-07 00:00:09", 1)
    )
    path = write_philly_json(tmp_path, good, good | {"jobid": "ok2"}, record)
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (4, field)


def test_broken_philly_json_reports_the_parser_line(tmp_path: Path) -> None:
    path = write(tmp_path, "log.json", '[\n{"jobid": "a",\n "user": }\n]\n')
    with pytest.raises(TraceError, match="bad JSON") as caught:
        load_trace(path)
    assert caught.value.line == 3
