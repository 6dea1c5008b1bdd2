"""The policy registry: names and options, checked before a policy is made."""

from __future__ import annotations

from typing import Any

import pytest

from policies.pollux import Pollux
from policies.registry import UnknownPolicyError, make_policy, policy_names
from policies.tiresias import Tiresias


def test_every_name_makes_its_policy_with_defaults() -> None:
    for name in policy_names():
        assert make_policy(name).name == name


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownPolicyError, match=r"unknown policy 'lottery' .*fifo"):
        make_policy("lottery")


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("pollux", {"p": "abc"}, "option 'p' must be a finite number, not 'abc'"),
        ("pollux", {"p": float("nan")}, "option 'p' must be a finite number, not nan"),
        ("tiresias", {"starve_limit": float("inf")}, "must be a finite number, not inf"),
        ("pollux", {"population": 2.5}, "option 'population' must be an integer"),
        ("fifo", {"backfill": 1}, "option 'backfill' must be a bool, not 1"),
        ("tiresias", {"thresholds_gpu_s": "x"}, "option 'thresholds_gpu_s' must be a list"),
        ("tiresias", {"thresholds_gpu_s": [100, "b"]}, "must be a finite number, not 'b'"),
        ("pollux", {"max_batch_sizes": {"cifar10": "big"}}, "must be an integer, not 'big'"),
        ("optimus", {"admission": 7}, "option 'admission' must be a str, not 7"),
        ("srtf", {"speed": 2}, r"unknown option 'speed' \(known: aware, name\)"),
    ],
)
def test_an_option_of_the_wrong_type_is_refused_by_name(
    name: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UnknownPolicyError, match=message):
        make_policy(name, **options)


def test_options_take_json_shapes() -> None:
    tiresias = make_policy("tiresias", thresholds_gpu_s=[100, 2000], starve_limit=2)
    assert isinstance(tiresias, Tiresias)
    assert tiresias.thresholds_gpu_s == (100.0, 2000.0)
    assert isinstance(tiresias.starve_limit, float)
    pollux = make_policy("pollux", restart_delay_s=None, max_batch_sizes={"cifar10": 512})
    assert isinstance(pollux, Pollux)
    assert pollux.restart_delay_s is None
    assert dict(pollux.max_batch_sizes or {}) == {"cifar10": 512}
