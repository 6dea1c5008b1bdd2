"""Placement by GPU type: a job goes to the type that runs it fastest, among those
with room for its gang (issue 31, item 3).

`FastestTypePlacer` wraps any placer; the rule itself lives in
controller.model.type_choice, beside the model, so that the policies that place by
counts of their own (Optimus) or wrap the snapshot's placer (Tiresias, Gandiva) apply
the same one. Wrapped around the chosen placer by `gpuflow replay/compare` when a
throughput matrix is given (`--throughputs`, gpuflow/replay_cmd.py), so that FIFO and
SRTF choose a type too; the Gavel policies choose types themselves (policies/gavel.py).
"""

from __future__ import annotations

from controller.model.type_choice import FastestTypePlacer

__all__ = ["FastestTypePlacer"]
