"""The API's replay processes (api.replays.executor) when the API dies: kill -9 of a
process that runs a replay in a child leaves no child behind, and the replay ends as
failed with the reason instead of running on unseen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from api.replays.run import SHUTDOWN_ERROR
from api.store.db import make_engine, make_sessionmaker
from api.store.models import Replay, TraceFile, User
from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
from tests.api.builders import migrated_sqlite, wait_for

ROOT = Path(__file__).resolve().parents[2]
# The API's part: a ReplayExecutor running replay 1 of the database in argv[1].
API = """
import sys, time
from api.replays.executor import ReplayExecutor
from tests.api.builders import migrated_sqlite

if __name__ == "__main__":
    executor = ReplayExecutor(migrated_sqlite(__import__("pathlib").Path(sys.argv[1])))
    executor.submit(1, lambda: None)
    time.sleep(600)
"""
LONG_TRACE_JOBS = 60_000  # minutes on 2x4: still running when the API is killed


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def test_a_killed_api_leaves_no_replay_process_and_its_replay_fails_with_a_reason(
    tmp_path: Path,
) -> None:
    settings = migrated_sqlite(tmp_path)
    trace = tmp_path / "long.csv"
    write_canonical(trace, generate(LONG_TRACE_JOBS, seed=3, cluster_gpus=8, load=0.9))
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    try:
        with sessions() as session:
            user = User(name="alice", tenant="vision", role="user")
            session.add(user)
            session.flush()
            row = TraceFile(
                **{"tenant": "vision", "user_id": user.id, "name": "long", "fmt": "gpuflow"},
                **{"path": str(trace), "jobs": LONG_TRACE_JOBS, "skipped": 0, "span_s": 1.0},
            )
            session.add(row)
            session.flush()
            session.add(
                Replay(
                    **{"tenant": "vision", "user_id": user.id, "trace_id": row.id},
                    **{"policy": "fifo", "cluster": "2x4", "placement": "consolidated"},
                    **{"interval_s": 60.0, "seed": 0, "status": "queued"},
                )
            )
            session.commit()
        script = tmp_path / "api_main.py"
        script.write_text(API)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        api = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env, cwd=ROOT)
        try:

            def running() -> bool:
                with sessions() as session:
                    row = session.get(Replay, 1)
                    return row is not None and row.status == "running"

            wait_for(running, timeout_s=120, every_s=0.2)
            children = _children(api.pid)
            assert children  # the replay's process (and multiprocessing's tracker)
        finally:
            api.send_signal(signal.SIGKILL)
            api.wait()
        wait_for(lambda: not any(_alive(c) for c in children), timeout_s=30, every_s=0.2)
        with sessions() as session:
            row = session.get(Replay, 1)
            assert row is not None and row.status == "failed" and row.error == SHUTDOWN_ERROR
    finally:
        engine.dispose()
