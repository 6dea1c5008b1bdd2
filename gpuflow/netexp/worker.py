"""The processes of a synthetic job: a sender (the job) and a receiver (its peer).

    python -m gpuflow.netexp.worker receive --bind 10.204.0.1 --port 5301 --comm-bytes N
    python -m gpuflow.netexp.worker send --src 10.204.0.11 --dst 10.204.0.1 --port 5301 \\
        --comm-bytes N --compute-s 0.3 --start-at T --stop-at T2 \\
        [--slot-period-s P --slot-offset-s O] [--lockstep]

Each iteration of the sender is a compute phase (a sleep of compute_s) and then a
communication phase: N bytes over one long-lived TCP connection, ended by the
receiver's one-byte acknowledgement once all N arrived. With a slot, the sender
waits for it (gpuflow.train.commslot) between the two, as a training job's
all-reduce hook does. The first iteration starts at wall time start_at; none starts
after stop_at. With --lockstep the experiment starts every iteration instead (the
sender writes "ready" and waits for "go" on stdin), so that jobs stay in phase.
The sender ends by printing one JSON line, {"ready_s", "comm_start_s": [...],
"end_s": [...]}, wall times of its communication starts and iteration ends.

Started by gpuflow.netexp.experiment inside the namespaces (`ip netns exec`).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from gpuflow.train.commslot import CommSlot, SlotGate

CHUNK_BYTES = 1 << 20
ACK = b"k"
CONNECT_TIMEOUT_S = 10.0


def receive(bind: str, port: int, comm_bytes: int) -> None:
    """Accept one connection; acknowledge every `comm_bytes` received until it closes."""
    with socket.create_server((bind, port)) as server:
        conn, _ = server.accept()
    with conn:
        buf = bytearray(CHUNK_BYTES)
        pending = comm_bytes
        while True:
            got = conn.recv_into(buf, min(CHUNK_BYTES, pending))
            if got == 0:
                return
            pending -= got
            if pending == 0:
                conn.sendall(ACK)
                pending = comm_bytes


def _connect(src: str, dst: str, port: int) -> socket.socket:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            return socket.create_connection(
                (dst, port), timeout=CONNECT_TIMEOUT_S, source_address=(src, 0)
            )
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)  # the receiver is still starting


def send(
    src: str,
    dst: str,
    port: int,
    comm_bytes: int,
    compute_s: float,
    start_at: float,
    stop_at: float,
    slot: CommSlot | None,
    lockstep: bool = False,
) -> dict[str, object]:
    payload = bytes(comm_bytes)
    comm_starts: list[float] = []
    ends: list[float] = []
    gate = SlotGate(slot)
    with _connect(src, dst, port) as conn:
        conn.settimeout(None)
        ready = time.time()
        if not lockstep:
            time.sleep(max(0.0, start_at - ready))
        while _may_go(lockstep, stop_at):
            time.sleep(compute_s)
            gate.wait()
            comm_starts.append(time.time())
            conn.sendall(payload)
            if conn.recv(1) != ACK:
                raise ConnectionError("receiver closed before acknowledging")
            ends.append(time.time())
    return {"ready_s": ready, "comm_start_s": comm_starts, "end_s": ends}


def _may_go(lockstep: bool, stop_at: float) -> bool:
    """Whether to run another iteration: the clock decides, or in lockstep the
    experiment, which answers "go" once every job of the step said "ready"."""
    if not lockstep:
        return time.time() < stop_at
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    return sys.stdin.readline() == "go\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuflow.netexp.worker")
    sub = parser.add_subparsers(dest="role", required=True)
    rx = sub.add_parser("receive")
    rx.add_argument("--bind", required=True)
    rx.add_argument("--port", type=int, required=True)
    rx.add_argument("--comm-bytes", type=int, required=True)
    tx = sub.add_parser("send")
    tx.add_argument("--src", required=True)
    tx.add_argument("--dst", required=True)
    tx.add_argument("--port", type=int, required=True)
    tx.add_argument("--comm-bytes", type=int, required=True)
    tx.add_argument("--compute-s", type=float, required=True)
    tx.add_argument("--start-at", type=float, required=True)
    tx.add_argument("--stop-at", type=float, required=True)
    tx.add_argument("--slot-period-s", type=float)
    tx.add_argument("--slot-offset-s", type=float, default=0.0)
    tx.add_argument("--lockstep", action="store_true")
    args = parser.parse_args(argv)
    if args.role == "receive":
        receive(args.bind, args.port, args.comm_bytes)
        return 0
    slot = None if args.slot_period_s is None else CommSlot(args.slot_period_s, args.slot_offset_s)
    result = send(args.src, args.dst, args.port, args.comm_bytes, args.compute_s,
                  args.start_at, args.stop_at, slot, args.lockstep)  # fmt: skip
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
