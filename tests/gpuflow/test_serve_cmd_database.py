"""`gpuflow admin create` and `gpuflow serve` with PostgreSQL down: one line, exit 1.

Run as subprocesses, as a user runs them: the message names the database without its
password, and no traceback follows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Port 1 (tcpmux) has no listener here: the connection is refused at once.
DEAD_URL = "postgresql://postgres:s3cret@127.0.0.1:1/none"
TIMEOUT_S = 60


@pytest.mark.parametrize(
    "argv", [["admin", "create", "alice"], ["serve", "--port", "0"]], ids=["admin", "serve"]
)
def test_unreachable_database_is_one_line_without_the_password(
    tmp_path: Path, argv: list[str]
) -> None:
    env = {**os.environ, "GPUFLOW_DATABASE_URL": DEAD_URL, "GPUFLOW_DATA_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuflow.cli", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env=env,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    shown_url = "postgresql+psycopg://postgres:***@127.0.0.1:1/none"
    assert lines[0].startswith(f"gpuflow: error: cannot use the database {shown_url}: ")
    assert "Connection refused" in lines[0]
    assert "s3cret" not in proc.stderr
