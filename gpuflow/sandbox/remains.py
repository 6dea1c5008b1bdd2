"""What a sandbox made, written down so that it is removed however the sandbox ends.

cluster.py `Sandbox.up` calls `clean_dead()` first (the remains of sandboxes that died
without tearing down), then `Remains.open()`, which reserves the sandbox's id (the
network's tag: every namespace, veth and bridge it makes is named after it) and holds
a lock for as long as the sandbox lives; each process the sandbox starts (the
control plane's, the service, every pod) is `add`ed as it starts. `close()` after a
clean teardown removes the record. The sandbox's reaper (reaper.py), a process of
its own, and any later sandbox's `clean_dead()` call `clean()` on a record whose
lock no living sandbox holds: its processes' groups killed (SIGTERM, SIGKILL after
`KILL_GRACE_S`), its namespaces and links deleted, its temporary folder removed.

A record is two files in the registry folder (`registry()`, one per machine, as the
namespaces are): `<id>.json`, rewritten whole (a rename) at each change, and
`<id>.lock`, flock-ed by the living sandbox. A process is named by its pid and its
start time (field 22 of /proc/PID/stat), so a pid the system gave to another process
since is never signalled.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import random
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpuflow.sandbox.network import remove_tagged

log = logging.getLogger(__name__)

REGISTRY_ENV = "GPUFLOW_SANDBOX_REGISTRY"  # overrides registry()
REGISTRY_NAME = "gpuflow-sandboxes"
KILL_GRACE_S = 1.0  # SIGTERM to SIGKILL: etcd, the API servers and idle workers exit at once
ID_TRIES = 100


def registry() -> Path:
    """Where every sandbox of this machine and user keeps its record:
    $GPUFLOW_SANDBOX_REGISTRY, else `gpuflow-sandboxes-<uid>` in the temporary folder."""
    env = os.environ.get(REGISTRY_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / f"{REGISTRY_NAME}-{os.getuid()}"


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the third on (state, ppid, ...), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return stat[stat.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])  # field 22 of the whole line


def running(pid: int, start: int) -> bool:
    """The process is the one that started at `start` and has not exited (a zombie,
    which only waits for its parent to collect it, has)."""
    fields = _stat(pid)
    return fields is not None and int(fields[19]) == start and fields[0] != "Z"


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    start: int
    name: str


@dataclass
class Remains:
    """The living sandbox's record: its id, folder and processes, under its lock."""

    id: str
    path: Path  # <registry>/<id>.json
    directory: Path
    temporary: bool  # the folder is the sandbox's own: removed with it
    processes: list[ProcessRecord] = field(default_factory=list)
    _lock_file: IO[bytes] | None = None
    _mutex: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, directory: Path, temporary: bool, folder: Path | None = None) -> Remains:
        """Reserve an id, the network's tag (`gfs`, this pid mod 10000 in 4 digits, 2
        random digits: short enough for interface names), take its lock and write
        the record."""
        folder = folder or registry()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for _ in range(ID_TRIES):
            sandbox_id = f"gfs{os.getpid() % 10000:04d}{random.randrange(100):02d}"
            # Locked before it has its name (a hard link, which fails on an id taken):
            # no clean_dead ever finds it unlocked and takes this sandbox for dead.
            new = folder / f".{sandbox_id}.{os.getpid()}.new"
            lock_file = new.open("wb")
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                os.link(new, folder / f"{sandbox_id}.lock")
            except FileExistsError:
                lock_file.close()
                continue  # another sandbox's, living or not yet cleaned
            finally:
                new.unlink(missing_ok=True)
            remains = cls(sandbox_id, folder / f"{sandbox_id}.json", directory, temporary)
            remains._lock_file = lock_file
            remains._write()
            return remains
        raise RuntimeError(f"no free sandbox id in {folder}")

    def add(self, pid: int, name: str) -> None:
        """Record a process just started (the leader of its own process group)."""
        start = start_time(pid)
        if start is None:
            return  # gone already: nothing to remove
        with self._mutex:
            if self._lock_file is None:
                return  # closed: the sandbox is down
            alive = [p for p in self.processes if start_time(p.pid) == p.start]
            self.processes = [*alive, ProcessRecord(pid, start, name)]
            self._write()

    def close(self) -> None:
        """After a clean teardown: the record and its lock removed."""
        with self._mutex:
            self.path.unlink(missing_ok=True)
            if self._lock_file is not None:
                self.path.with_suffix(".lock").unlink(missing_ok=True)
                self._lock_file.close()
                self._lock_file = None

    def _write(self) -> None:
        body = {
            "id": self.id,
            "pid": os.getpid(),
            "directory": str(self.directory),
            "temporary": self.temporary,
            "processes": [vars(p) for p in self.processes],
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        tmp.replace(self.path)


def clean_dead(folder: Path | None = None) -> list[str]:
    """Clean every recorded sandbox whose lock is free (its process is gone): the ids
    cleaned. A record another process (its reaper) is cleaning is left to it."""
    folder = folder or registry()
    cleaned = []
    for lock_path in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
        with _locked(lock_path, wait=False) as held:
            if held:
                clean(lock_path.with_suffix(".json"))
                lock_path.unlink(missing_ok=True)
                cleaned.append(lock_path.stem)
    return cleaned


@contextlib.contextmanager
def _locked(path: Path, wait: bool) -> Iterator[bool]:
    """Hold the lock of `path` (yield True), or yield False: held by another and not
    `wait`, or the file is gone."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        yield False
        return
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            yield False
            return
        # Removed by whoever held it before us (a clean close, another cleaner).
        yield path.exists()


def reap(state: Path) -> bool:
    """Wait for the sandbox's lock (it is released when the sandbox exits, however),
    then clean what its record names: what the reaper runs. False: nothing left (a
    clean teardown removed the record)."""
    lock_path = state.with_suffix(".lock")
    with _locked(lock_path, wait=True) as held:
        if not held or not state.exists():
            return False
        clean(state)
        lock_path.unlink(missing_ok=True)
        return True


def clean(state: Path) -> None:
    """Remove what the record at `state` names, then the record (its lock held)."""
    try:
        record: dict[str, Any] = json.loads(state.read_text())
    except (OSError, ValueError) as exc:  # died before its first write, or mid-write
        log.warning("sandbox record unreadable path=%s error=%s", state, exc)
        record = {"id": state.stem, "directory": ""}  # its network is still named so
    sandbox_id = str(record["id"])
    processes = [ProcessRecord(**p) for p in record.get("processes", [])]
    killed = kill_groups(processes)
    removed = remove_tagged(sandbox_id)
    directory = Path(record["directory"])
    if record.get("temporary") and directory.name.startswith("gpuflow-sandbox-"):
        shutil.rmtree(directory, ignore_errors=True)
    state.unlink(missing_ok=True)
    state.with_suffix(".tmp").unlink(missing_ok=True)  # a rewrite the death cut short
    log.warning(
        "cleaned a dead sandbox id=%s pid=%s processes=%d network=%d",
        sandbox_id,
        record.get("pid"),
        killed,
        len(removed),
    )


def kill_groups(processes: list[ProcessRecord]) -> int:
    """SIGTERM the process group of each process still the one recorded; SIGKILL the
    groups once their leaders have exited or after KILL_GRACE_S (what a leader's
    children left running goes then); how many groups were signalled."""
    live = [p for p in processes if running(p.pid, p.start)]
    for p in live:
        _signal_group(p.pid, signal.SIGTERM)
    _wait_exited(live, KILL_GRACE_S)
    for p in live:
        _signal_group(p.pid, signal.SIGKILL)
    _wait_exited(live, KILL_GRACE_S)  # SIGKILL is delivered at once; exiting takes a moment
    return len(live)


def _wait_exited(processes: list[ProcessRecord], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(running(p.pid, p.start) for p in processes):
        time.sleep(0.02)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
