"""Tiresias' records handed from state to state copy-on-write (policies.tiresias.ledger):
every state in a chain reads as it was written, whichever is read first."""

from __future__ import annotations

from policies.tiresias.ledger import Promotion, Records


def test_each_state_in_a_chain_reads_its_own_records() -> None:
    first = Records({"a": (1, 10.0), "b": (2, 20.0)}, {"p": Promotion(5.0, 1.0, 1.0)})
    ledger, second = first.hand_on()
    ledger.note("a", (2, 30.0), None)  # moved down a queue
    ledger.note("c", None, Promotion(40.0, 3.0, 2.0))  # new, promoted
    ledger.forget("p")
    ledger.note("a", None, None)  # written twice: the first value is what is undone
    ledger, third = second.hand_on()
    ledger.forget("b")
    ledger.note("d", (1, 50.0), None)
    assert third.own() == (
        {"d": (1, 50.0)},
        {"c": Promotion(40.0, 3.0, 2.0)},
    )
    assert first.own() == ({"a": (1, 10.0), "b": (2, 20.0)}, {"p": Promotion(5.0, 1.0, 1.0)})
    assert second.own() == ({"b": (2, 20.0)}, {"c": Promotion(40.0, 3.0, 2.0)})
    assert third.own() == ({"d": (1, 50.0)}, {"c": Promotion(40.0, 3.0, 2.0)})


def test_a_rebuilt_state_hands_on_its_own_copy() -> None:
    first = Records({"a": (1, 10.0)}, {})
    ledger, second = first.hand_on()
    ledger.forget("a")
    assert first.own() == ({"a": (1, 10.0)}, {})
    again, other = first.hand_on()  # a second round on the first state
    again.note("b", (1, 5.0), None)
    assert other.own() == ({"a": (1, 10.0), "b": (1, 5.0)}, {})
    assert second.own() == ({}, {})
