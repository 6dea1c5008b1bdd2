"""The policy ConfigMap with options (issue 25): `data.options` in --policy-opt's
syntax, parsed by operators.policy_config.parse_options, and the running operator
switching on a changed name or options, or refusing the switch (the previous policy
kept, one WARNING line) when the options do not parse or the policy refuses them."""

from __future__ import annotations

import logging

import pytest

from operators.kube import KubeApi
from operators.operator import Operator
from operators.policy_config import (
    PolicyChoice,
    RunningPolicy,
    parse_options,
    read_choice,
    read_running,
    write_policy,
)
from tests.operators.harness import running_operator
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for


def test_options_take_the_policy_opt_syntax_a_line_each() -> None:
    text = """
        # Gandiva's quantum, for Gandiva only; a margin for any policy
        gandiva:quantum_s=30
        pack_margin = 0.25
        tiresias:queue_thresholds_s=[3600, 36000]
        name=text that is no JSON
    """
    assert parse_options(text) == (
        ("gandiva", "quantum_s", 30),
        ("", "pack_margin", 0.25),
        ("tiresias", "queue_thresholds_s", [3600, 36000]),
        ("", "name", "text that is no JSON"),
    )
    assert parse_options("") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("quantum_s=1\nno equals sign", "line 2: 'no equals sign': expected [POLICY:]KEY=VALUE"),
        ("=3", "line 1: '=3': expected"),
        ("x=" + "9" * 40, "line 1: x: an integer of more than 18 digits"),
    ],
)
def test_a_bad_line_is_an_error_naming_the_configmap_and_the_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^ConfigMap gpuflow-policy data\.options ") as info:
        parse_options(text)
    assert message in str(info.value)


def _set(api: KubeApi, policy: str, options: str) -> None:
    write_policy(api, "default", policy, options=options)  # one write: read whole


def _in_effect(op: Operator) -> tuple[str, float]:
    policy = op.controller.policy
    return policy.name, float(getattr(policy, "quantum_s", -1.0))


def test_the_operator_switches_on_options_and_refuses_bad_ones(
    gpu_cluster: RealCluster, caplog: pytest.LogCaptureFixture
) -> None:
    api = gpu_cluster.api
    caplog.set_level(logging.INFO, logger="operators.operator")
    with running_operator(gpu_cluster.client, policy="fifo") as op:
        op.policy_watch.every_s = 0.1
        _set(api, "gandiva", "gandiva:quantum_s=30\ntiresias:unknown=1")
        wait_for("gandiva with a 30 s quantum", lambda: _in_effect(op) == ("gandiva", 30.0))
        first = op.controller.policy
        # The same options rewritten (a comment added): nothing to switch, state kept.
        rewritten = "# tuned\ngandiva:quantum_s=30\ntiresias:unknown=1"
        _set(api, "gandiva", rewritten)
        wait_for(
            "the rewrite read", lambda: op.policy_watch.seen == PolicyChoice("gandiva", rewritten)
        )
        assert op.controller.policy is first
        # Only the options change: a new Gandiva with the new quantum.
        _set(api, "gandiva", "gandiva:quantum_s=45")
        wait_for("a 45 s quantum", lambda: _in_effect(op) == ("gandiva", 45.0))
        assert op.controller.policy is not first
        # The operator says what it runs next to the admin's choice, which it keeps.
        running = RunningPolicy("gandiva", {"quantum_s": 45})
        wait_for("the options published", lambda: read_running(api, "default") == running)
        assert read_choice(api, "default") == PolicyChoice("gandiva", "gandiva:quantum_s=45")
        switched = [r for r in caplog.records if r.getMessage().startswith("policy switched")]
        assert len(switched) == 2, [r.getMessage() for r in switched]
        kept = op.controller.policy

        def refused(text: str) -> str:
            return next(
                (r.getMessage() for r in caplog.records
                 if r.getMessage().startswith("policy not switched") and text in r.getMessage()),
                "",
            )  # fmt: skip

        # A key Gandiva does not have, then a line that does not parse, then a value of
        # the wrong type: each refused with one WARNING, the 45 s Gandiva kept.
        for options, why in [
            ("gandiva:quantum_secs=30", "unknown option 'quantum_secs'"),
            ("gandiva:quantum_s", "data.options line 1: 'gandiva:quantum_s': expected"),
            ("gandiva:quantum_s=[1, 2]", "option 'quantum_s' must be a finite number"),
        ]:
            _set(api, "gandiva", options)
            line = wait_for(f"the refusal of {options!r}", lambda why=why: refused(why))
            assert "policy=gandiva" in line
            assert op.controller.policy is kept and _in_effect(op) == ("gandiva", 45.0)
        # A bad policy switch keeps the policy too; a good one then goes through.
        _set(api, "srtf", "quantum_s=30")  # srtf has no quantum: refused
        wait_for("srtf refused", lambda: refused("policy 'srtf'"))
        assert op.controller.policy is kept
        _set(api, "srtf", "gandiva:quantum_s=30")
        wait_for("srtf", lambda: _in_effect(op)[0] == "srtf")
    warnings = [r for r in caplog.records if r.getMessage().startswith("policy not switched")]
    assert len(warnings) == 4 and all(r.levelno == logging.WARNING for r in warnings)
