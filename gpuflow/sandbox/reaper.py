"""The sandbox's reaper: a process that removes what the sandbox made once it dies,
however it dies (kill -9 included).

cluster.py `Sandbox.up` starts it (`Reaper.start`) right after recording the sandbox
(remains.py `Remains.open`), in a session of its own, so that a signal to the
sandbox's process group or terminal does not reach it. Its stdin is the read end of
a pipe whose write end only the sandbox holds (not inherited by any child): the
kernel closes it when the sandbox exits, and the reaper, reading end of file, waits
for the sandbox's lock and cleans what the record names (remains.py `reap`). After
a clean teardown the record is gone first, `stop()` closes the pipe and the reaper
exits at once. `python -m gpuflow.sandbox.reaper RECORD` is its command line; it
imports the standard library and remains.py's network helpers only, to start fast.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuflow.sandbox.remains import Remains, reap

STOP_WAIT_S = 10.0  # a clean stop: the reaper reads EOF, finds no record and exits


@dataclass
class Reaper:
    """The reaper process and the pipe's write end that keeps it waiting."""

    process: subprocess.Popen[bytes]
    pipe_fd: int

    @classmethod
    def start(cls, remains: Remains, log_path: Path) -> Reaper:
        read_fd, write_fd = os.pipe()  # neither inherited by later children (PEP 446)
        cmd = [sys.executable, "-m", "gpuflow.sandbox.reaper", str(remains.path)]
        try:
            with log_path.open("ab") as log_file:
                process = subprocess.Popen(
                    cmd,
                    stdin=read_fd,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(process, write_fd)

    def stop(self) -> None:
        """After the record was removed: let the reaper go and wait for it."""
        if self.pipe_fd >= 0:
            os.close(self.pipe_fd)
            self.pipe_fd = -1
        try:
            self.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m gpuflow.sandbox.reaper RECORD.json\n")
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s reaper: %(message)s")
    sys.stdin.buffer.read()  # until the sandbox's end of the pipe closes
    reap(Path(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
