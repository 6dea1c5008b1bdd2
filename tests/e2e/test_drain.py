"""A drain with a slow checkpoint, with the example's real training process in the
sandbox (issue 25): the worker takes 10 s to write its SIGTERM checkpoint (the
example's --checkpoint-write-s; the grace period is 30 s), and the new attempt on the
other node starts only once the old one has exited, resuming from exactly the step
the SIGTERM checkpoint wrote, in the old attempt's own checkpoint directory.

Before: attempt 3 of a drained job started 2.6 s before attempt 2 wrote its SIGTERM
checkpoint; with a slower write it would have resumed from an older checkpoint."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from api.cluster_mode.node_admin import patch_node
from controller.maintenance import NodeAction
from gpuflow.sandbox.cluster import Sandbox, SandboxConfig
from tests.e2e.test_live_training import example_job, logs, status, steps_logged
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

WRITE_S = 10.0  # the slow checkpoint
GRACE_S = 30  # spec.checkpoint.gracePeriodSeconds: more than the write and a step
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", re.MULTILINE)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    config = SandboxConfig(nodes=2, gpus_per_node=2, policy="fifo", directory=tmp_path)
    with Sandbox(config) as sb:
        yield sb


def stamp_s(text: str, pattern: str, last: bool = False) -> float:
    """The log time (epoch s) of the first (or last) timestamped line of `text` that
    matches `pattern`."""
    lines = [
        m.group(1)
        for line in text.splitlines()
        if re.search(pattern, line) and (m := STAMP.match(line))
    ]
    assert lines, pattern
    return datetime.strptime(lines[-1 if last else 0], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_a_drain_resumes_from_the_sigterm_checkpoint_that_took_10_s(sandbox: Sandbox) -> None:
    sb = sandbox
    body = example_job("drained", steps=400, duration_s=120.0, sleep_s=0.05)
    body["spec"]["checkpoint"]["gracePeriodSeconds"] = GRACE_S
    # Only the SIGTERM and the final checkpoints: none periodic to resume from instead.
    body["spec"]["template"]["spec"]["containers"][0]["command"] += [
        "--checkpoint-interval-s=3600", f"--checkpoint-write-s={WRITE_S}",
    ]  # fmt: skip
    sb.api.create_dljob("default", body)
    wait_for("drained to train", lambda: len(steps_logged(logs(sb, "drained").get(1, ""))) >= 3,
             120)  # fmt: skip
    node = str(status(sb, "drained")["nodes"])
    assert node in sb.node_names
    patch_node(sb.api, node, NodeAction.DRAIN, "tester", time.time())
    wait_for("drained to finish", lambda: status(sb, "drained").get("phase") == "Succeeded", 240)

    first, second = logs(sb, "drained")[1], logs(sb, "drained")[2]
    stopped = re.search(r"stopping at step (\d+) on SIGTERM \(exit 75\)", first)
    resumed = re.search(r"resumed from (\S+) at step (\d+)", second)
    assert stopped and resumed, (first[-2000:], second[-2000:])
    # The SIGTERM checkpoint took its 10 s from the last window's report (logged at
    # the stop, just before the write); the operator made the new attempt's pods
    # only after it was written (their Scheduled event; the same host's clock).
    step = stopped.group(1)
    written = stamp_s(first, rf"checkpoint at step {step} written")
    assert written - stamp_s(first, rf"step {step} loss", last=True) >= WRITE_S - 0.5
    events = sb.api.core.list_namespaced_event("default").items
    (scheduled,) = [
        e for e in events
        if e.involved_object.name == "drained" and e.reason == "Scheduled"
        and e.message.startswith("attempt 2")
    ]  # fmt: skip
    assert scheduled.event_time.timestamp() >= written
    assert int(resumed.group(2)) == int(stopped.group(1)) > 0
    assert "/attempt-1/" in resumed.group(1)
    assert min(steps_logged(second)) > int(stopped.group(1))
    assert max(steps_logged(second)) == 400
    final = status(sb, "drained")
    assert final["restarts"] == 1 and not final.get("failures")
    pvc = sb.directory / "pvc" / "default" / "ckpt" / "drained"
    assert sorted(p.name for p in pvc.iterdir() if p.is_dir()) == ["attempt-2"]  # pruned
