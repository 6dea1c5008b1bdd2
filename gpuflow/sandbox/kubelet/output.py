"""A container's stdout and stderr as the sandbox's kubelet keeps them: the bytes in
`<container>.log`, each line's time beside them in `<container>.log.times`.

A runtime's CRI log stamps every line with the time it was read; kubelet_server.py
needs those times for `kubectl logs --timestamps` and `--since`. The kubelet
(kubelet.py) hands the process the write end of a pipe (`ContainerOutput.fd`) and a
thread of this module copies what comes into the log file unchanged (readers of the
file, the tests and `sandbox` users, see the process's own bytes) and appends, for
each line that begins, one record to the times file: its byte offset in the log and
the time its first byte arrived (two little-endian unsigned 64-bit integers: offset,
Unix nanoseconds). So the n-th line of the log has the n-th record, and a tail of N
lines the last N records.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
import time
from pathlib import Path

RECORD = struct.Struct("<QQ")  # (offset of a line's first byte, Unix ns it arrived)
CHUNK_BYTES = 64 * 1024  # one read of the pipe at most


def times_path(log: Path) -> Path:
    return log.with_name(log.name + ".times")


class ContainerOutput:
    """The pipe a container writes to and the thread that keeps what it writes.
    `fd` goes to the process (stdout and stderr); `started()` once it has it; `wait()`
    once it has exited (the copy ends when every writer is gone)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._log_file = log.open("ab")
        self._times_file = times_path(log).open("ab")
        self._offset = self._log_file.tell()
        # A log appended to (a pod started again) goes on at a line's start.
        self._at_line_start = self._offset == 0 or _ends_in_newline(log)
        read_fd, self.fd = os.pipe()
        self._read_fd = read_fd
        self._thread = threading.Thread(
            target=self._copy, daemon=True, name=f"log-{log.parent.name}"
        )

    def started(self) -> None:
        """The process holds the write end: close ours (else the copy never sees the
        end) and start copying."""
        os.close(self.fd)
        self._thread.start()

    def abandon(self) -> None:
        """No process started: close everything."""
        for fd in (self.fd, self._read_fd):
            os.close(fd)
        self._log_file.close()
        self._times_file.close()

    def wait(self, timeout_s: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def copying(self) -> bool:
        """Whether more may come (a writer still holds the pipe)."""
        return self._thread.is_alive()

    def _copy(self) -> None:
        try:
            while chunk := os.read(self._read_fd, CHUNK_BYTES):
                now_ns = time.time_ns()
                records = bytearray()
                for i in _line_starts(chunk, self._at_line_start):
                    records += RECORD.pack(self._offset + i, now_ns)
                self._times_file.write(records)
                self._times_file.flush()  # before the bytes: a reader finds their times
                self._log_file.write(chunk)
                self._log_file.flush()
                self._offset += len(chunk)
                self._at_line_start = chunk.endswith(b"\n")
        finally:
            os.close(self._read_fd)
            self._log_file.close()
            self._times_file.close()


def _line_starts(chunk: bytes, at_line_start: bool) -> list[int]:
    """The indices in `chunk` where a line begins."""
    starts = [0] if at_line_start else []
    i = chunk.find(b"\n")
    while i != -1 and i + 1 < len(chunk):
        starts.append(i + 1)
        i = chunk.find(b"\n", i + 1)
    return starts


def _ends_in_newline(log: Path) -> bool:
    with log.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


class LineTimes:
    """A log's line records: offsets ascending, with their times; `refresh()` reads
    those appended since."""

    def __init__(self, log: Path) -> None:
        self.path = times_path(log)
        self.offsets: list[int] = []
        self.times_ns: list[int] = []
        self._read_bytes = 0
        self.refresh()

    def refresh(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._read_bytes)
                data = f.read()
        except FileNotFoundError:
            return
        data = data[: len(data) - len(data) % RECORD.size]  # a record being written
        self._read_bytes += len(data)
        for offset, at_ns in RECORD.iter_unpack(data):
            self.offsets.append(offset)
            self.times_ns.append(at_ns)

    def first_since(self, since_ns: int) -> int | None:
        """The offset of the first line that arrived at or after `since_ns`; None if
        none did."""
        # Times ascend with offsets: lines arrive in order.
        i = bisect.bisect_left(self.times_ns, since_ns)
        return self.offsets[i] if i < len(self.offsets) else None

    def stamped(self, data: bytes, offset: int) -> bytes:
        """`data` (the log from `offset`) with each line that begins in it prefixed by
        its time in RFC 3339 with nanoseconds, as `kubectl logs --timestamps` shows."""
        out = bytearray()
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            end = len(data) if end == -1 else end + 1
            i = bisect.bisect_left(self.offsets, offset + start)
            if i < len(self.offsets) and self.offsets[i] == offset + start:
                out += rfc3339_ns(self.times_ns[i]).encode() + b" "
            out += data[start:end]
            start = end
        return bytes(out)


def rfc3339_ns(unix_ns: int) -> str:
    """`2026-11-28T22:14:48.123456789Z`, as the kubelet writes a line's time."""
    seconds, ns = divmod(unix_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ns:09d}Z"
