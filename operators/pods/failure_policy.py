"""What a worker pod's failure means for its job, as batch/v1 Job decides it.

`operators.jobs.classify` parses `spec.podFailurePolicy` (`parse_rules`, ValueError
naming the field) and `operators.lifecycle.Lifecycle` judges a failed attempt with
`judge` and waits `RestartPolicy.delay_s` before restarting it. The rules are batch/v1
Job's podFailurePolicy restricted to exit codes of the worker container (no
`onPodConditions`, no `FailIndex`): evaluated in order, the first match wins, a failure
no rule matches counts against backoffLimit. One addition: the checkpoint exit code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from operators.kube import Obj
from operators.pods.status import exit_code

# The exit code of a worker that checkpointed on SIGTERM and stopped: "preempted,
# checkpointed", never a failure, whatever the rules say. 75 is EX_TEMPFAIL of BSD's
# sysexits.h ("temporary failure; the user is invited to retry"), which no shell or
# signal death produces (those are 126, 127, 128+n) and which PyTorch does not use.
EXIT_CHECKPOINTED = 75

# batch/v1 Job's restart back-off as the Kubernetes docs give it ("Pod backoff failure
# policy": 10 s, 20 s, 40 s ... capped at six minutes). The job controller's source
# (pkg/controller/job/job_controller.go, DefaultJobPodFailureBackOff) has the same base
# and has since raised MaxJobPodFailureBackOff to 10 min; we keep the documented cap.
BACKOFF_BASE_S = 10.0
BACKOFF_CAP_S = 360.0
# batch/v1 Job's validation limits of podFailurePolicy.
MAX_RULES = 20
MAX_EXIT_CODES = 255


class RuleAction(Enum):
    FAIL_JOB = "FailJob"  # the job fails at once
    IGNORE = "Ignore"  # restart at once, not counted against backoffLimit
    COUNT = "Count"  # a failure: counted, restart after the back-off


@dataclass(frozen=True)
class RestartPolicy:
    """The back-off before restarting after a counted failure (tests shorten it)."""

    base_s: float = BACKOFF_BASE_S
    cap_s: float = BACKOFF_CAP_S

    def delay_s(self, failures: int) -> float:
        """The wait after the `failures`-th counted failure: base, 2 x base, ... cap."""
        if failures < 1:
            return 0.0
        return float(min(self.cap_s, self.base_s * 2.0 ** min(failures - 1, 62)))


@dataclass(frozen=True)
class Rule:
    action: RuleAction
    operator: str  # "In" or "NotIn"
    values: frozenset[int]

    def matches(self, code: int) -> bool:
        # As batch/v1: exit code 0 is success and never matches, not even NotIn.
        if code == 0:
            return False
        return (code in self.values) == (self.operator == "In")


@dataclass(frozen=True)
class Verdict:
    """What a failed attempt means: the action, and the pod and exit code behind it
    (`checkpointed`: every failed pod exited with EXIT_CHECKPOINTED)."""

    action: RuleAction
    pod: str
    code: int | None
    rule: int | None = None  # index of the rule that matched
    checkpointed: bool = False
    # The pod's status.reason: with no exit code, why (a kubelet's rejection of a pod
    # it never ran, OutOfnvidia.com/gpu; an eviction)
    pod_reason: str = ""

    def describe(self) -> str:
        code = "no exit code" if self.code is None else f"exit code {self.code}"
        if self.code is None and self.pod_reason:
            code += f" ({self.pod_reason})"
        rule = "" if self.rule is None else f" (podFailurePolicy rule {self.rule})"
        return f"pod {self.pod} failed with {code}{rule}"


def parse_rules(spec: Obj) -> tuple[Rule, ...]:
    """spec.podFailurePolicy's rules; ValueError whose message starts with the field."""
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return ()
    if not isinstance(policy, dict):
        raise ValueError("spec.podFailurePolicy: must be an object")
    rules = policy.get("rules")
    where = "spec.podFailurePolicy.rules"
    if not isinstance(rules, list):
        raise ValueError(f"{where}: required, a list")
    if len(rules) > MAX_RULES:
        raise ValueError(f"{where}: at most {MAX_RULES} rules, not {len(rules)}")
    return tuple(_rule(r, f"{where}[{i}]") for i, r in enumerate(rules))


def _rule(raw: object, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be an object")
    names = [a.value for a in RuleAction]
    if raw.get("action") not in names:
        raise ValueError(f"{where}.action: must be one of {', '.join(names)}")
    codes = raw.get("onExitCodes")
    if not isinstance(codes, dict):
        raise ValueError(f"{where}.onExitCodes: required, an object")
    op = codes.get("operator")
    if op not in ("In", "NotIn"):
        raise ValueError(f"{where}.onExitCodes.operator: must be In or NotIn")
    values = codes.get("values")
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_EXIT_CODES:
        raise ValueError(f"{where}.onExitCodes.values: 1 to {MAX_EXIT_CODES} exit codes")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{where}.onExitCodes.values: must be integers")
    if len(set(values)) != len(values):
        raise ValueError(f"{where}.onExitCodes.values: must be unique")
    if op == "In" and 0 in values:
        raise ValueError(f"{where}.onExitCodes.values: 0 (success) cannot be In")
    return Rule(RuleAction(raw["action"]), op, frozenset(values))


def action_for(rules: Iterable[Rule], code: int | None) -> tuple[RuleAction, int | None]:
    """The action of the first rule matching `code` and its index; Count if none does."""
    if code is not None:
        for i, rule in enumerate(rules):
            if rule.matches(code):
                return rule.action, i
    return RuleAction.COUNT, None


def judge(failed: Iterable[Obj], rules: tuple[Rule, ...]) -> Verdict:
    """The verdict on an attempt whose `failed` pods (not deleted by the operator)
    failed: FailJob if any pod's rule says so, else Count if any pod's failure counts,
    else Ignore (every pod checkpointed or ignored by a rule)."""
    verdicts = []
    for pod in sorted(failed, key=lambda p: str(p["metadata"]["name"])):
        name, code = str(pod["metadata"]["name"]), exit_code(pod)
        if code == EXIT_CHECKPOINTED:
            verdicts.append(Verdict(RuleAction.IGNORE, name, code, checkpointed=True))
            continue
        action, rule = action_for(rules, code)
        reason = str((pod.get("status") or {}).get("reason") or "")
        verdicts.append(Verdict(action, name, code, rule, pod_reason=reason))
    if not verdicts:
        raise ValueError("judge: no failed pod")
    for action in (RuleAction.FAIL_JOB, RuleAction.COUNT):
        for v in verdicts:
            if v.action is action:
                return v
    checkpointed = all(v.checkpointed for v in verdicts)
    first = verdicts[0]
    return Verdict(RuleAction.IGNORE, first.pod, first.code, first.rule, checkpointed)
