from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from controller.traces.formats.alibaba import (
    GPU_MEM_MIB_PER_GPU,
    OPENB_POD_COLUMNS,
    load_openb_nodes,
)
from tests.controller.traces.builders import write

OPENB_HEADER = ",".join(OPENB_POD_COLUMNS)


def test_pai_task_table_groups_tasks_into_jobs(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pai_task_table.csv",
        """
        j1,ps,1.0,Terminated,100.0,500.0,600.0,29.3,0.0,
        j1,worker,2.0,Terminated,110.0,600.0,400.0,29.3,100.0,V100
        j2,tensorflow,1.0,Terminated,50.0,350.0,600.0,29.3,50.0,MISC
        j3,tensorflow,1.0,Terminated,60.0,90.0,600.0,29.3,,
        j4,tensorflow,1.0,Waiting,,,600.0,29.3,100.0,
        j5,worker,3.0,Terminated,70.0,170.0,400.0,29.3,150.0,T4
        """,
    )
    trace = load_trace(path)
    assert trace.fmt == "alibaba-pai" and trace.skipped == 2
    shared, j5, j1 = trace.jobs
    assert (shared.job_id, shared.submit_s, shared.num_gpus, shared.duration_s) == (
        "j2",
        0.0,
        1,
        300.0,
    )
    assert shared.gpu_mem_mib == GPU_MEM_MIB_PER_GPU // 2
    assert (j5.submit_s, j5.num_gpus, j5.duration_s, j5.gpu_mem_mib) == (20.0, 5, 100.0, None)
    assert (j1.submit_s, j1.num_gpus, j1.duration_s, j1.gpu_mem_mib) == (50.0, 2, 500.0, None)


def test_pai_task_table_with_header_row(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tasks.csv",
        """
        job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type
        j1,worker,1.0,Terminated,10.0,20.0,600.0,29.3,100.0,V100
        """,
    )
    (job,) = load_trace(path).jobs
    assert (job.job_id, job.num_gpus, job.duration_s) == ("j1", 1, 10.0)


def test_pai_job_table_is_refused_with_a_pointer_to_the_task_table(tmp_path: Path) -> None:
    path = write(tmp_path, "pai_job_table.csv", "j1,inst,user,Terminated,4550879.0,4551416.0\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path, "alibaba-pai")
    assert "pai_task_table" in str(caught.value)


def test_openb_pods_map_gpu_shares_to_memory(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "openb_pod_list_default.csv",
        f"""
        {OPENB_HEADER}
        openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497
        openb-pod-0022,4000,15258,1,250,,BE,Running,9679175,9973826,9679175
        openb-pod-0035,16000,32768,1,1000,V100M16|V100M32,LS,Running,9967058,9968575,9967063
        openb-pod-0001,32000,65536,0,0,,LS,Running,8535213,12475899,8535216
        openb-pod-0008,12500,65536,2,1000,,LS,Pending,9661695,9661708,
        """,
    )
    trace = load_trace(path)
    assert trace.fmt == "alibaba-openb" and trace.skipped == 2
    big, share, whole = trace.jobs
    assert (big.job_id, big.submit_s, big.num_gpus, big.duration_s) == (
        "openb-pod-0017",
        0.0,
        8,
        10769854 - 9437497,
    )
    assert (big.gpu_mem_mib, big.priority) == (None, 1)
    assert (share.num_gpus, share.gpu_mem_mib, share.priority) == (1, GPU_MEM_MIB_PER_GPU // 4, 0)
    # Every resource a pod asks for is kept; GPU models by gpuflow's GPU type names.
    assert (big.cpu_milli, big.host_mem_mib, big.gpu_milli, big.gpu_models) == (
        88000,
        327680,
        0,
        frozenset(),
    )
    assert (share.cpu_milli, share.host_mem_mib, share.gpu_milli) == (4000, 15258, 250)
    # A share is the pod's utilisation; whole GPUs keep the catalogue's (None).
    assert (share.gpu_util, big.gpu_util, whole.gpu_util) == (0.25, None, None)
    assert whole.gpu_models == {"V100-PCIE-16GB", "V100-PCIE-32GB"}
    assert share.submit_s == 9679175 - 9437497
    assert (whole.num_gpus, whole.gpu_mem_mib, whole.priority, whole.duration_s) == (
        1,
        None,
        2,
        1512.0,
    )


def test_openb_unknown_gpu_model_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", f"{OPENB_HEADER}\np,1,1,1,1000,X9000,LS,Running,0,10,1\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (2, "gpu_spec")
    assert "X9000" in str(caught.value)


def test_openb_share_of_several_gpus_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.csv", f"{OPENB_HEADER}\np,1,1,2,500,,LS,Running,0,10,1\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (2, "gpu_milli")


def test_openb_nodes(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "openb_node_list_all_node.csv",
        """
        sn,cpu_milli,memory_mib,gpu,model
        openb-node-0227,32000,262144,0,
        openb-node-0228,128000,786432,8,G3
        openb-node-0229,96000,786432,8,V100M32
        """,
    )
    assert load_openb_nodes(path) == [
        ("openb-node-0227", 0, ""),
        ("openb-node-0228", 8, "G3"),
        ("openb-node-0229", 8, "V100M32"),
    ]
