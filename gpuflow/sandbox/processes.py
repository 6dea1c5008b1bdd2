"""The sandbox's own server processes (the API service in service.py, the control
plane's etcd, kube-apiserver and kube-controller-manager in controlplane.py): how one
is started with its log, how it is stopped, and the end of its log that an error
message quotes. `on_start` (a `ProcessHook`) is told each process started, as
`(pid, name)`: the sandbox records them (remains.py) for its reaper."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ProcessHook = Callable[[int, str], None]


def start_process(
    cmd: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    on_start: ProcessHook | None = None,
) -> subprocess.Popen[bytes]:
    """Start `cmd` with stdout and stderr appended to `log_path`, no stdin, in a session
    of its own: Ctrl-C in a terminal reaches the sandbox, which stops its servers in
    order, not all at once."""
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    if on_start is not None:
        on_start(process.pid, log_path.stem)
    return process


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
    """ ": line | line ..." of the log's last `lines` lines, or "" (none, unreadable)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    last = text.strip().splitlines()[-lines:]
    return (": " + " | ".join(last)) if last else ""
