"""The node agent's HTB tree in tc's terms: its handles, bucket sizes, commands and output.

Called by the bandwidth enforcer (operators/agent/bandwidth.py), which keeps a
node's tree in step with its pods' rates, and by gpuflow.netexp's links
(gpuflow/netexp/link.py), which build the same classes for the phase experiments.
The tree's layout is described in bandwidth.py; here are the class ids under the
root handle, how burst and quantum are sized for a rate, the argument lists of
`tc class|qdisc|filter`, `run_tc`, and the parsing of `tc class show`.

Rates are Gbit/s, as everywhere in gpuflow; tc is given whole bits per second
("200000000bit") and byte counts for burst and quantum. Every tc call goes through
`subprocess.run` with an argument list, never a shell. docs/bandwidth.md explains
the choices and the measured accuracy.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

BITS_PER_GBIT = 1_000_000_000

# The whole tree lives under handle 1:. Minor 1 is the link class, ffff the default
# class; pods take minors 2..fffe, which double as their filter preference (tc
# preferences are 16-bit, 0 meaning "pick one", so every pod minor is valid).
ROOT_HANDLE = "1:"
LINK_MINOR = 0x1
DEFAULT_MINOR = 0xFFFF
FIRST_POD_MINOR = 0x2
LAST_POD_MINOR = 0xFFFE

# The default class's guaranteed share of the link, so that unclassified traffic
# (kubelet, DNS, the agent itself) is never starved by pods; it borrows the rest.
DEFAULT_FLOOR_FRACTION = 0.01

# Burst sizing. tc's own default burst is rate/HZ + MTU, and with high-resolution
# timers tc takes HZ = 10^9 from /proc/net/psched, so the default collapses to about
# one MTU: smaller than a single 64 KiB GSO packet, and HTB then loses throughput to
# timer latency at Gbit/s rates (and tc prints cburst 0b at 100 Gbit/s). We size the
# bucket to cover BURST_TIME_S of traffic at the class's rate, one jiffy at HZ=250
# (Debian's kernel default), the latency HTB's watchdog can see under load; and never
# below MIN_BURST_BYTES = two maximal GSO packets, so that a class can always send
# one while the next is being charged. Measured on veth (docs/bandwidth.md): with
# 1 ms, 1 Gbit/s came out at 93 % of the rate; with 4 ms, at 96 %, which is the TCP
# goodput ceiling over Ethernet framing (1448 / 1514).
BURST_TIME_S = 0.004
GSO_MAX_BYTES = 65_536
MIN_BURST_BYTES = 2 * GSO_MAX_BYTES

# Quantum: HTB derives it as rate/r2q (r2q = 10) and warns in the kernel log when the
# result falls outside [1000, 200000] bytes. We pass it explicitly, clamped to those
# kernel bounds, so no warning is logged at any rate. The quantum shapes how classes
# that borrow (the default one, and pods with a floor) share what they borrow.
R2Q = 10
# HTB's prio runs from 0 (lent to first) to 7; a priority level L (higher: more
# important, as controller.network.phases.crux) becomes prio HTB_MAX_PRIO - L.
HTB_MAX_PRIO = 7
MIN_QUANTUM_BYTES = 1_000
MAX_QUANTUM_BYTES = 200_000

Runner = Callable[[list[str]], str]


class BandwidthError(RuntimeError):
    """A tc command failed; the message carries tc's stderr on one line."""


def rate_bits(rate_gbps: float) -> int:
    """Gbit/s to whole bits per second (what tc's "bit" suffix means)."""
    return round(rate_gbps * BITS_PER_GBIT)


def tc_rate(rate_gbps: float) -> str:
    """tc's spelling of a rate: "bit" is bits per second ("bps" would be bytes)."""
    return f"{rate_bits(rate_gbps)}bit"


def burst_bytes(rate_gbps: float) -> int:
    """Token-bucket size in bytes for a class at `rate_gbps` (see BURST_TIME_S)."""
    return max(MIN_BURST_BYTES, math.ceil(rate_bits(rate_gbps) / 8 * BURST_TIME_S))


def quantum_bytes(rate_gbps: float) -> int:
    """HTB quantum in bytes: rate/r2q clamped to the kernel's bounds."""
    return min(MAX_QUANTUM_BYTES, max(MIN_QUANTUM_BYTES, rate_bits(rate_gbps) // 8 // R2Q))


def class_id(minor: int) -> str:
    """A class id under the root handle: tc reads the minor as hex."""
    return f"{ROOT_HANDLE}{minor:x}"


def htb_class_args(
    verb: str,
    dev: str,
    minor: int,
    parent: str,
    rate_gbps: float,
    ceil_gbps: float,
    prio: int | None = None,
) -> list[str]:
    """`tc class add|change` for one HTB class, with explicit burst, cburst and quantum
    (and prio when given: HTB's default is 0)."""
    return [
        "class", verb, "dev", dev, "parent", parent, "classid", class_id(minor),
        "htb", "rate", tc_rate(rate_gbps), "ceil", tc_rate(ceil_gbps),
        "burst", str(burst_bytes(rate_gbps)), "cburst", str(burst_bytes(ceil_gbps)),
        "quantum", str(quantum_bytes(rate_gbps)),
        *(() if prio is None else ("prio", str(prio))),
    ]  # fmt: skip


def leaf_args(dev: str, minor: int, leaf_qdisc: str) -> list[str]:
    """The pod's own queue under its class (HTB's default leaf is a plain pfifo)."""
    handle = f"{minor:x}:"
    return ["qdisc", "add", "dev", dev, "parent", class_id(minor), "handle", handle, leaf_qdisc]


def filter_add_args(dev: str, minor: int, ip: str) -> list[str]:
    """A u32 filter sending packets whose source address is `ip` to the pod's class."""
    addr = ipaddress.ip_address(ip)
    if addr.version == 4:
        proto, match = "ip", ["match", "ip", "src", f"{addr}/32"]
    else:
        proto, match = "ipv6", ["match", "ip6", "src", f"{addr}/128"]
    return [
        "filter", "add", "dev", dev, "parent", ROOT_HANDLE, "protocol", proto,
        "pref", str(minor), "u32", *match, "flowid", class_id(minor),
    ]  # fmt: skip


def filter_del_args(dev: str, minor: int) -> list[str]:
    """Deletes every filter at the pod's preference (there is exactly one)."""
    return ["filter", "del", "dev", dev, "parent", ROOT_HANDLE, "pref", str(minor)]


_TEXT_CLASS = re.compile(
    r"^class htb (?P<handle>\S+) .*?(?:\bprio (?P<prio>\d+) )?\brate (?P<rate>\S+)"
    r"(?: ceil (?P<ceil>\S+))?",
    re.MULTILINE,
)
_TEXT_RATE = re.compile(r"^(?P<num>[0-9.]+)(?P<prefix>[KMGT]?)(?P<iec>i?)bit$")
_PREFIX_POWER = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}


def parse_tc_rate(text: str) -> float:
    """A rate as tc prints it ("123456Kbit", "1Gbit", "2Gibit") to Gbit/s."""
    m = _TEXT_RATE.match(text)
    if m is None:
        raise BandwidthError(f"cannot parse tc rate {text!r}")
    base = 1024 if m["iec"] else 1000
    scale: int = base ** _PREFIX_POWER[m["prefix"]]
    return float(m["num"]) * scale / BITS_PER_GBIT


@dataclass(frozen=True)
class HtbClass:
    """An HTB class as the kernel reports it: Gbit/s guaranteed and at most, and prio."""

    rate_gbps: float
    ceil_gbps: float
    prio: int


def parse_classes(stdout: str) -> dict[str, HtbClass]:
    """HTB class id -> its rate, ceil and prio, from `tc -j class show`.

    Newer iproute2 prints HTB classes as JSON (rates in bytes/s); 6.1 (Debian 12)
    ignores -j for classes and prints text, with rates rounded to the display unit
    (at worst a part in a thousand). Both are accepted.
    """
    text = stdout.strip()
    out: dict[str, HtbClass] = {}
    if text.startswith("["):
        for entry in json.loads(text):
            if entry.get("class") == "htb" and "rate" in entry:
                rate = int(entry["rate"]) * 8 / BITS_PER_GBIT
                ceil = int(entry.get("ceil", entry["rate"])) * 8 / BITS_PER_GBIT
                out[str(entry["handle"])] = HtbClass(rate, ceil, int(entry.get("prio", 0)))
        return out
    for m in _TEXT_CLASS.finditer(text):
        rate = parse_tc_rate(m["rate"])
        ceil = rate if m["ceil"] is None else parse_tc_rate(m["ceil"])
        out[m["handle"]] = HtbClass(rate, ceil, int(m["prio"] or 0))
    return out


def parse_class_rates(stdout: str) -> dict[str, float]:
    """HTB class id -> rate in Gbit/s (`parse_classes`)."""
    return {handle: c.rate_gbps for handle, c in parse_classes(stdout).items()}


def run_tc(argv: list[str]) -> str:
    """Runs one command; a failure becomes a BandwidthError with stderr on one line."""
    try:
        proc = subprocess.run(argv, check=True, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise BandwidthError(f"{argv[0]} not found") from exc
    except subprocess.CalledProcessError as exc:
        detail = " ".join(str(exc.stderr).split()) or f"exit status {exc.returncode}"
        raise BandwidthError(f"{' '.join(argv)}: {detail}") from exc
    return proc.stdout
