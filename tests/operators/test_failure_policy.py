"""Failure semantics of the operator, as batch/v1 Jobs have them: the pure pieces.

The back-off schedule and podFailurePolicy rules (operators/pods/failure_policy.py), and
`classify` (operators/jobs.py) and `judge` on pods as the kubelet reports them. The
operator's failure handling against the control plane is tests/operators/test_failures.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators.jobs import State, classify
from operators.kube.times import parse_time
from operators.pods.failure_policy import (
    EXIT_CHECKPOINTED,
    RestartPolicy,
    RuleAction,
    action_for,
    judge,
    parse_rules,
)
from tests.operators.builders import make_dljob

# -- the back-off schedule and the rules ------------------------------------------------


@pytest.mark.parametrize(
    ("failures", "delay_s"),
    [(0, 0.0), (1, 10.0), (2, 20.0), (3, 40.0), (6, 320.0), (7, 360.0), (1000, 360.0)],
)
def test_backoff_doubles_from_10_s_to_6_min(failures: int, delay_s: float) -> None:
    assert RestartPolicy().delay_s(failures) == delay_s


RULES = parse_rules(
    {
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42, 43]}},
                {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
                {"action": "Count", "onExitCodes": {"operator": "In", "values": [3, 42]}},
                {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1, 3]}},
            ]
        }
    }
)


@pytest.mark.parametrize(
    ("code", "action", "rule"),
    [
        (42, RuleAction.FAIL_JOB, 0),
        (3, RuleAction.IGNORE, 1),  # the first match wins, not the later Count
        (1, RuleAction.COUNT, None),  # no rule matches: counted
        (7, RuleAction.FAIL_JOB, 3),  # NotIn
        (0, RuleAction.COUNT, None),  # 0 never matches, not even NotIn
        (None, RuleAction.COUNT, None),  # no exit code (evicted, node shut down)
    ],
)
def test_rules_first_match_wins(code: int | None, action: RuleAction, rule: int | None) -> None:
    assert action_for(RULES, code) == (action, rule)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"rules": "x"}, "spec.podFailurePolicy.rules:"),
        ({"rules": [{"action": "Retry"}]}, "spec.podFailurePolicy.rules[0].action:"),
        ({"rules": [{"action": "Ignore"}]}, "spec.podFailurePolicy.rules[0].onExitCodes:"),
        (
            {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "Is", "values": [1]}}]},
            "spec.podFailurePolicy.rules[0].onExitCodes.operator:",
        ),
        (
            {"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [0]}}]},
            "spec.podFailurePolicy.rules[0].onExitCodes.values:",
        ),
        (
            {"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": []}}]},
            "spec.podFailurePolicy.rules[0].onExitCodes.values:",
        ),
    ],
)
def test_invalid_rules_name_the_field(policy: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_rules({"podFailurePolicy": policy})


# -- classify on pods as the kubelet reports them ---------------------------------------


T0 = "2024-01-01T00:00:05Z"


def _pod(rank: int, phase: str, *, started: str = "", code: int | None = None) -> Any:
    """A pod of attempt 1 of a 2-rank job `j`, its worker in `phase`."""
    state: dict[str, Any] = {}
    if code is not None:
        state = {"terminated": {"exitCode": code, "startedAt": started or None}}
    elif started:
        state = {"running": {"startedAt": started}}
    return {
        "metadata": {
            "name": f"j-1-{rank}",
            "namespace": "default",
            "labels": {"gpuflow.dev/job": "j", "gpuflow.dev/attempt": "1"},
            "annotations": {
                "gpuflow.dev/rank": str(rank),
                "gpuflow.dev/world-size": "2",
                "gpuflow.dev/allocation": "[]",
                "gpuflow.dev/started-at": "2024-01-01T00:00:00Z",
            },
        },
        "status": {"phase": phase, "containerStatuses": [{"name": "worker", "state": state}]},
    }


def _job(**status: Any) -> Any:
    job = make_dljob("j", 16)
    job["metadata"].update(uid="u", creationTimestamp="2024-01-01T00:00:00Z")
    job["status"] = {"phase": "Running", "attempt": 1, **status}
    return job


def _deleted(pod: Any) -> Any:
    pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    return pod


def test_service_counts_from_when_the_whole_gang_ran() -> None:
    pods = [
        _pod(0, "Running", started="2024-01-01T00:00:05Z"),
        _pod(1, "Running", started="2024-01-01T00:00:20Z"),  # pulled its image late
    ]
    assert classify(_job(), pods).running_s == parse_time("2024-01-01T00:00:20Z")
    pods[1] = _pod(1, "Pending")
    assert classify(_job(), pods).running_s is None


@pytest.mark.parametrize(
    ("status", "pods", "state"),
    [
        ({}, [_pod(0, "Running", started=T0), _pod(1, "Failed", code=1)], State.WORKER_FAILED),
        # Stopped by the operator: any exit code, not a failure.
        (
            {},
            [_deleted(_pod(0, "Failed", code=1)), _deleted(_pod(1, "Failed", code=143))],
            State.WAITING,
        ),
        # Already settled: the failed pod stays but is never counted again.
        (
            {"failedAttempt": 1},
            [_pod(0, "Failed", code=1), _deleted(_pod(1, "Running"))],
            State.WAITING,
        ),
        (
            {"failedAttempt": 1, "restartAfter": "2024-01-01T00:01:00.5Z"},
            [_pod(0, "Failed", code=1)],
            State.BACKOFF,
        ),
        # A stopped rank with others alive: the gang is broken, not failed.
        ({}, [_deleted(_pod(0, "Failed", code=1)), _pod(1, "Running")], State.BROKEN),
    ],
)
def test_classify_counts_a_failure_only_once(status: Any, pods: list[Any], state: State) -> None:
    assert classify(_job(**status), pods).state is state


def test_judge_checkpoint_exit_is_not_a_failure_but_a_real_one_is() -> None:
    checkpointed = _pod(0, "Failed", code=EXIT_CHECKPOINTED)
    verdict = judge([checkpointed], RULES)
    assert verdict.action is RuleAction.IGNORE and verdict.checkpointed
    verdict = judge([checkpointed, _pod(1, "Failed", code=1)], RULES)
    assert verdict.action is RuleAction.COUNT and verdict.pod == "j-1-1"
