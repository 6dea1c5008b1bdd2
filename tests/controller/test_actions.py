"""The simulator's plan diff: the edit-journal path agrees with the full comparison."""

from __future__ import annotations

import random

import pytest

from controller.actions import plan_diff
from controller.model import Allocation, EditedAllocations


@pytest.mark.parametrize("seed", range(30))
def test_edited_allocations_diff_equals_full_diff(seed: int) -> None:
    rng = random.Random(seed)
    current = {f"j{i}": Allocation.whole([(i, 0)]) for i in range(rng.randint(0, 20))}
    run = EditedAllocations(current)
    for _ in range(rng.randint(0, 15)):
        op = rng.choice(["set", "same", "equal", "del", "pop", "update", "setdefault"])
        key = f"j{rng.randint(0, 25)}"
        if op == "set":
            run[key] = Allocation.whole([(100 + rng.randint(0, 5), 1)])
        elif op == "same" and key in current:
            run[key] = current[key]  # the very object: kept
        elif op == "equal" and key in current:
            run[key] = Allocation(current[key].shares)  # equal, rebuilt
        elif op == "del" and key in run:
            del run[key]
        elif op == "pop":
            run.pop(key, None)
        elif op == "update":
            run.update({key: Allocation.whole([(200, 0)])})
        elif op == "setdefault":
            run.setdefault(key, Allocation.whole([(300, 0)]))

    # Either path may report an equal-but-rebuilt allocation as changed (the caller
    # keeps it); what differs in value must be reported by both.
    def real(diff: tuple[list[str], list[str]]) -> tuple[list[str], list[str]]:
        changed, stopped = diff
        return [k for k in changed if run[k] != current.get(k)], stopped

    journal, full = plan_diff(run, current), plan_diff(dict(run), current)
    assert real(journal) == real(full)
    assert journal[0] == sorted(journal[0]) and journal[1] == sorted(journal[1])


def test_a_plan_not_built_from_the_snapshot_is_diffed_in_full() -> None:
    a, b = Allocation.whole([(0, 0)]), Allocation.whole([(1, 0)])
    assert plan_diff({"x": a, "y": b}, {"x": a, "z": b}) == (["y"], ["z"])
    assert plan_diff({"x": a}, {"x": a}) == ([], [])
