"""The sandbox's own server processes (the API service in service.py, the control
plane's etcd, kube-apiserver and kube-controller-manager in controlplane.py): how one
is stopped, and the end of its log that an error message quotes."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any


def stop_process(process: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; only this process, not its children."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def log_tail(path: Path, lines: int = 5) -> str:
    """": line | line ..." of the log's last `lines` lines, or "" (none, unreadable)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    last = text.strip().splitlines()[-lines:]
    return (": " + " | ".join(last)) if last else ""
