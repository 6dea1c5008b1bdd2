from pathlib import Path

import pytest

from controller.traces import FORMATS, TraceError, UnknownFormatError, detect_format
from tests.controller.traces.builders import write


@pytest.mark.parametrize(
    ("name", "first_line", "expected"),
    [
        ("a.csv", "job_id,submit_s,num_gpus,duration_s", "gpuflow"),
        ("a.csv", "timestamp,duration,num_gpus,gpu_time,cluster", "philly-csv"),
        ("a.csv", "name,time,application,num_replicas,batch_size", "adaptdl"),
        ("a.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval", "tiresias"),
        (
            "a.csv",
            "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue",
            "helios",
        ),
        (
            "a.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time",
            "alibaba-openb",
        ),
        (
            "a.csv",
            "4f057009a5d481acec67b088,tensorflow,1.0,Terminated,1739162.0,1739200.0,600.0,29.296875,50.0,MISC",
            "alibaba-pai",
        ),
        (
            "a.csv",
            "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type",
            "alibaba-pai",
        ),
        ("cluster_job_log", "[", "philly-json"),
        ("log.json", "{}", "philly-json"),
        ("x.trace", "anything", "gavel"),
        ("x.txt", "LM (batch size 5)\tcmd\t--steps\t1\t100\t3.0\t2", "gavel"),
        ("UPPER.csv", " Job_ID , Submit_S , Num_GPUs , Iterations", "gpuflow"),
    ],
)
def test_detects_format_from_first_line(
    tmp_path: Path, name: str, first_line: str, expected: str
) -> None:
    assert expected in FORMATS
    path = write(tmp_path, name, f"\n{first_line}\nmore\n")
    assert detect_format(path) == expected


def test_ambiguous_header_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "a.csv", "job_id,submit_s,num_gpus,timestamp,duration\n")
    with pytest.raises(UnknownFormatError, match="more than one format") as caught:
        detect_format(path)
    assert "gpuflow" in caught.value.message and "philly-csv" in caught.value.message


@pytest.mark.parametrize(
    ("first_line", "hint"),
    [
        ("sn,cpu_milli,memory_mib,gpu,model", "node list"),
        ("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node", "cluster spec"),
        ("j1,inst,user,Terminated,4550879.0,4551416.0", "PAI job table"),
        ("job_name,inst_id,user,status,start_time,end_time", "PAI job table"),
        ("a,b,c", "cannot tell"),
        ("a\tb\tc", "not a Gavel trace"),
    ],
)
def test_unknown_files_say_what_they_look_like(tmp_path: Path, first_line: str, hint: str) -> None:
    path = write(tmp_path, "x.csv", first_line + "\n")
    with pytest.raises(UnknownFormatError, match=hint) as caught:
        detect_format(path)
    for name in FORMATS:
        assert name in str(caught.value)


def test_empty_file_is_a_trace_error(tmp_path: Path) -> None:
    path = write(tmp_path, "empty.csv", "\n\n")
    with pytest.raises(TraceError, match="empty"):
        detect_format(path)


def test_binary_file_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "blob.csv"
    path.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(UnknownFormatError):
        detect_format(path)
