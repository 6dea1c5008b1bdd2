"""Builders for the coflow replay's tests: a tiny trace file in coflow-benchmark's format."""

from __future__ import annotations

from pathlib import Path


def write_trace(tmp: Path, ports: int, lines: list[str], name: str = "t.txt") -> Path:
    """A trace of `lines` (one coflow each) on `ports` ports, written under `tmp`."""
    file = tmp / name
    file.write_text(f"{ports} {len(lines)}\n" + "".join(line + "\n" for line in lines))
    return file
