"""argparse types for the CLI's number options (bounded integers and finite floats),
the one-line error of bad input (`CliError`), the check of a file argument
(`regular_file`) and policy options (`--policy-opt [POLICY:]KEY=VALUE`, parsed by
policies/option_text.py, on replay, compare, sandbox and operator run).

Used by every command module (gpuflow.cli, serve_cmd, operator_cmd, sandbox_cmd,
coflow_cmd) in place of `type=int` and `type=float`, so that a negative count, a zero
interval, a port past 65535, `nan`, `1e309` or an integer of thousands of digits ends
in argparse's one-line usage error naming the option (exit 2) instead of an infinite
loop, an OverflowError or a traceback further on.
"""

from __future__ import annotations

import argparse
import math
import os
import stat
from collections.abc import Callable, Sequence
from typing import Any

from policies import option_text

# 18 digits hold any count, seed or priority a user means and still fit an int64
# (a database column or a numpy seed); more is a typo or an attack. The same bound
# as a policy option's integers.
MAX_INTEGER_DIGITS = option_text.MAX_INTEGER_DIGITS
# The longest wall-clock wait an option may ask for (a week): longer is a typo, and
# threading's waits refuse timeouts past threading.TIMEOUT_MAX with an OverflowError.
MAX_WAIT_S = 7 * 24 * 3600.0
MAX_PORT = 65535
_SHOWN_CHARS = 20


def _shown(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]!r}..."


def integer(text: str) -> int:
    """An integer of at most `MAX_INTEGER_DIGITS` digits."""
    digits = text.strip().lstrip("+-")
    if len(digits) > MAX_INTEGER_DIGITS:
        raise argparse.ArgumentTypeError(
            f"not an integer of at most {MAX_INTEGER_DIGITS} digits: {_shown(text)}"
        )
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {_shown(text)}") from None


def finite(text: str) -> float:
    """A number that is neither NaN nor infinite (nor so large it overflows to infinity)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {_shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {_shown(text)}")
    return value


def bounded_int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [minimum, maximum] (no maximum: 18 digits)."""

    def parse(text: str) -> int:
        value = integer(text)
        if value < minimum or (maximum is not None and value > maximum):
            wanted = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, not {_shown(text)}")
        return value

    return parse


def bounded_float(
    minimum: float, maximum: float = math.inf, *, inclusive: bool = True
) -> Callable[[str], float]:
    """An argparse type: a finite number >= minimum (> minimum unless `inclusive`)
    and <= maximum."""

    def parse(text: str) -> float:
        value = finite(text)
        low_ok = value >= minimum if inclusive else value > minimum
        if not low_ok or value > maximum:
            low = f"{'>=' if inclusive else '>'} {minimum:g}"
            wanted = low if maximum == math.inf else f"{low} and <= {maximum:g}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, not {_shown(text)}")
        return value

    return parse


positive_int = bounded_int(1)
non_negative_int = bounded_int(0)
port = bounded_int(0, MAX_PORT)
positive_float = bounded_float(0.0, inclusive=False)
non_negative_float = bounded_float(0.0)
# A wall-clock interval, timeout or lease length in seconds.
wait_s = bounded_float(0.0, MAX_WAIT_S, inclusive=False)


class CliError(Exception):
    """Bad input: printed as one line, exit code 2."""


def regular_file(option: str, name: str | None) -> None:
    """Refuse a FIFO, device or directory given where a file is read.

    Checked with stat before anything opens it: opening a FIFO blocks until a writer
    comes, and reading /dev/zero never ends. A name that is no file at all is left to
    the reader (a cluster may be a preset or NODESxGPUS).
    """
    if name is None:
        return
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise CliError(f"{option} {name}: not a regular file")


def scoped_policy_options(raw: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    """`[POLICY:]KEY=VALUE` items as (policy or "" for any, key, value); CliError
    naming the item when one is not of that form (policies/option_text.py)."""
    try:
        return tuple(option_text.parse_item(item) for item in raw)
    except ValueError as exc:
        raise CliError(f"--policy-opt {exc}") from None


def parsed_policy_options(raw: Sequence[str]) -> tuple[tuple[str, str, Any], ...]:
    """`[POLICY:]KEY=VALUE` items as (policy or "", key, value) with each value parsed
    (`option_values`): what the operator and the sandbox take."""
    return tuple(
        (scope, key, option_values([(key, value)])[key])
        for scope, key, value in scoped_policy_options(raw)
    )


def policy_options(raw: Sequence[str], policy: str) -> tuple[tuple[str, str], ...]:
    """The `[POLICY:]KEY=VALUE` items that apply to `policy`, as (key, value)."""
    return tuple((k, v) for scope, k, v in scoped_policy_options(raw) if scope in ("", policy))


def option_values(options: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Each option's value: JSON where it parses (numbers, lists, booleans), else the
    text itself; CliError naming the option for an integer past MAX_INTEGER_DIGITS or
    a value nested too deeply (policies/option_text.py). NaN and infinities are left
    to the policy's checks."""
    values: dict[str, Any] = {}
    for key, raw in options:
        try:
            values[key] = option_text.parse_value(key, raw)
        except ValueError as exc:
            raise CliError(f"--policy-opt {exc}") from None
    return values
