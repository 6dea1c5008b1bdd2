"""argparse types for the CLI's number options: finite floats and integers of bounded size.

Used by gpuflow.cli (integers) and gpuflow.serve_cmd in place of `type=int` and
`type=float`, so that `1e309`, `nan` or an integer of thousands of digits ends in
argparse's usage error (exit 2) instead of an infinite loop or a traceback further on.
"""

from __future__ import annotations

import argparse
import math

# 18 digits hold any count, seed or priority a user means and still fit an int64
# (a database column or a numpy seed); more is a typo or an attack.
MAX_INTEGER_DIGITS = 18
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
