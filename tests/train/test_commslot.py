"""Comm slots (gpuflow.train.commslot): the arithmetic, the annotations, and a real
2-rank DDP job (gloo on 127.0.0.1) whose steps follow a slot published while it runs."""

import signal
from pathlib import Path

import pytest

from gpuflow.train.commslot import (
    ANN_COMM_OFFSET_S,
    ANN_COMM_PERIOD_S,
    CommSlot,
    SlotGate,
    SlotWatcher,
    slot_from_annotations,
)
from gpuflow.train.preemption import EXIT_CHECKPOINTED
from operators import crd
from tests.train.metrics_server import MetricsServer, free_port
from tests.train.test_example import _launch, _values, _wait_for, server

__all__ = ["server"]  # the fixture, shared with test_example


def test_the_annotations_are_the_ones_the_operator_names() -> None:
    assert (ANN_COMM_PERIOD_S, ANN_COMM_OFFSET_S) == (crd.ANN_COMM_PERIOD_S, crd.ANN_COMM_OFFSET_S)


@pytest.mark.parametrize(
    ("now_s", "last", "delay_s", "index"),
    [
        (10.25, None, 0.0, 10),  # the slot opens now (offset 0.25 of a 1 s cycle)
        (10.30, None, 0.0, 10),  # late by 0.05 s, within the grace of 0.1 s: go
        (10.30, 10, 0.95, 11),  # but slot 10 was used already: the next one
        (10.50, None, 0.75, 11),  # too late for slot 10
        (10.20, None, 0.05, 10),  # early: wait for it
        (-0.50, None, 0.75, 0),  # before the epoch: floor, not truncation
    ],
)
def test_a_job_waits_for_its_slot_and_uses_each_slot_once(
    now_s: float, last: int | None, delay_s: float, index: int
) -> None:
    got = CommSlot(period_s=1.0, offset_s=0.25).delay_s(now_s, last)
    assert got[0] == pytest.approx(delay_s)
    assert got[1] == index


@pytest.mark.parametrize(("period", "offset"), [(0.0, 0.0), (-1.0, 0.0), (float("nan"), 0.0),
                                                (1.0, float("inf"))])  # fmt: skip
def test_a_bad_slot_names_its_field(period: float, offset: float) -> None:
    with pytest.raises(ValueError, match=r"period_s|offset_s"):
        CommSlot(period, offset)


def test_a_gate_holds_a_fast_job_to_one_communication_per_period() -> None:
    now = [100.0]
    gate = SlotGate(CommSlot(0.5, 0.0), clock=lambda: now[0])
    assert gate.wait() == 0.0  # slot 200 opens at 100.0
    now[0] = 100.01  # the next step is ready at once, still inside slot 200's grace
    with pytest.MonkeyPatch.context() as mp:
        slept: list[float] = []
        mp.setattr("gpuflow.train.commslot.time.sleep", slept.append)
        assert gate.wait() == pytest.approx(0.49)
        assert slept == [pytest.approx(0.49)]
    assert SlotGate(None).wait() == 0.0


def test_annotations_give_a_slot_or_none() -> None:
    assert slot_from_annotations({}) is None
    assert slot_from_annotations({ANN_COMM_PERIOD_S: "2.5"}) == CommSlot(2.5, 0.0)
    both = {ANN_COMM_PERIOD_S: "2.5", ANN_COMM_OFFSET_S: "1.25"}
    assert slot_from_annotations(both) == CommSlot(2.5, 1.25)
    assert slot_from_annotations({ANN_COMM_PERIOD_S: "soon"}) is None
    assert slot_from_annotations({ANN_COMM_PERIOD_S: "0"}) is None


def test_the_watcher_reports_changes_of_the_slot_only(tmp_path: Path) -> None:
    f = tmp_path / "annotations"
    watcher = SlotWatcher(f, min_interval_s=0.0)
    assert watcher.poll() == (False, None)  # no file yet
    f.write_text(f'{ANN_COMM_PERIOD_S}="2"\n{ANN_COMM_OFFSET_S}="0.5"\n')
    assert watcher.poll() == (True, CommSlot(2.0, 0.5))
    f.write_text(
        f'{ANN_COMM_PERIOD_S}="2"\n{ANN_COMM_OFFSET_S}="0.5"\ngpuflow.dev/batch-size="8"\n'
    )
    assert watcher.poll() == (False, None)  # the file changed, the slot did not
    f.write_text('gpuflow.dev/batch-size="8"\n')
    assert watcher.poll() == (True, None)  # the slot was withdrawn


@pytest.mark.slow
def test_a_running_ddp_job_follows_a_slot_published_while_it_runs(
    tmp_path: Path, server: MetricsServer
) -> None:
    period_s = 0.3  # far longer than a step of the example (~10 ms)
    args = ["--steps", "100000", "--batch-size", "32", "--seed", "3"]
    args += ["--report-interval-s", "0.2", "--step-sleep-s", "0.005"]
    port = free_port()
    ranks = [_launch(tmp_path, r, 2, port, server, args) for r in range(2)]
    log = tmp_path / "rank1-1.log"  # rank 1 adopts what rank 0 read: the sync carried it
    adopted = f"comm slot CommSlot(period_s={period_s}, offset_s=0.1)"
    try:
        _wait_for(lambda: len(_values(server, "step_time_s")) >= 3, ranks, "free steps")
        free = _values(server, "step_time_s")
        for r in range(2):  # the kubelet renders the operator's annotations on every pod
            (tmp_path / f"podinfo-{r}" / "annotations").write_text(
                f'{ANN_COMM_PERIOD_S}="{period_s}"\n{ANN_COMM_OFFSET_S}="0.1"\n'
            )
        _wait_for(lambda: adopted in log.read_text(), ranks, "the slot adopted")
        since = len(server.requests)
        _wait_for(lambda: len(_values(server, "step_time_s", since)) >= 6, ranks, "slotted steps")
        # Past the report that straddles the adoption and the next: its first slot
        # begins at the next slot boundary, less than a period away (CI once measured
        # 0.256 s there, then 0.294-0.304 s).
        slotted = _values(server, "step_time_s", since)[2:]
        for r in range(2):
            (tmp_path / f"podinfo-{r}" / "annotations").write_text('gpuflow.dev/batch-size="32"\n')
        _wait_for(lambda: "comm slot none" in log.read_text(), ranks, "the slot withdrawn")
        since = len(server.requests)
        _wait_for(lambda: len(_values(server, "step_time_s", since)) >= 3, ranks, "freed steps")
        freed = _values(server, "step_time_s", since)[1:]
        for p in ranks:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=20) for p in ranks]
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
    assert codes == [EXIT_CHECKPOINTED, EXIT_CHECKPOINTED]
    assert max(free) < period_s / 3
    # One all-reduce per slot: every step takes a period.
    assert all(abs(t - period_s) / period_s < 0.1 for t in slotted), slotted
    assert max(freed) < period_s / 3
