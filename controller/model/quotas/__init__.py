"""Quotas: a tree of GPU quotas that decides which tenant's jobs may run.

An organisation's quota holds its teams' quotas; a job belongs to one leaf. Each
quota has a guarantee (GPUs it always gets when it has the work), an optional
limit (GPUs it never exceeds, borrowing included) and a weight (its part of the GPUs
left once every guarantee is served). An amount is a plain number of GPUs of any model,
or a number per GPU model (`{"A100": 32, "V100": 16}`); a tree uses one form or the
other throughout.

Built by `controller.quotas.spec` from YAML (replays' `--queues FILE`) and by the
Kubernetes backend from `Quota` resources (and, for a release, the deprecated `Queue`
ones); read by `controller.quotas` (admission and reclaim, between the policy and the
backend), by the GPU-choice filter's quota half (`room`) and by the reports.

Which quota a job belongs to (`QuotaTree.leaf_of`): the leaf its spec names
(`JobSpec.queue`) if any; else the leaf that lists the job's tenant in its
`tenants`; else the leaf named `default` if the tree has one; else none, and the job
waits with the reason `NoQueue`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from controller.model.job import JobSpec

# The key of a quota given as a plain number: GPUs of any model.
ANY_MODEL = "*"
# The leaf a job of a tenant that no leaf lists belongs to, when the tree has it.
DEFAULT_QUEUE = "default"


class QuotaSpecError(ValueError):
    """A queue tree that breaks a rule; `field` is the path of the offending value,
    e.g. `queues[1].limit` or `queues[0].children[2].name`; read from a file, its
    `source` and the `line` of that value: `{source}:{line}: {field}: {message}`."""

    def __init__(
        self, field: str, message: str, *, source: str | None = None, line: int | None = None
    ) -> None:
        self.field = field
        self.message = message
        self.source = source
        self.line = line
        where = ":".join(str(p) for p in (source, line) if p is not None)
        super().__init__(f"{where}: {field}: {message}" if where else f"{field}: {message}")


@dataclass(frozen=True, slots=True)
class GpuQuota:
    """GPUs per GPU model, as sorted `(model, gpus)` pairs; `ANY_MODEL` for any."""

    by_model: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, value: int | Mapping[str, int]) -> GpuQuota:
        """A quota from a plain number (any model) or a model -> GPUs mapping."""
        if isinstance(value, int):
            return cls(((ANY_MODEL, value),))
        return cls(tuple(sorted(value.items())))

    @property
    def total(self) -> int:
        """GPUs of every model together."""
        return sum(n for _, n in self.by_model)

    @property
    def any_model(self) -> bool:
        """True for a plain number of GPUs (no model named)."""
        return all(m == ANY_MODEL for m, _ in self.by_model)

    def models(self) -> frozenset[str]:
        return frozenset(m for m, _ in self.by_model)

    def get(self, model: str) -> int:
        """GPUs of `model` (0 if the quota does not name it)."""
        for m, n in self.by_model:
            if m == model:
                return n
        return 0


@dataclass(frozen=True, slots=True)
class QuotaNode:
    """One queue. A leaf's `tenants` default to its own name; an inner queue has
    children and no tenants."""

    name: str
    guarantee: GpuQuota = field(default_factory=lambda: GpuQuota.of(0))
    limit: GpuQuota | None = None
    weight: float = 1.0
    tenants: tuple[str, ...] = ()
    children: tuple[QuotaNode, ...] = ()

    def __post_init__(self) -> None:
        if not self.children and not self.tenants:
            object.__setattr__(self, "tenants", (self.name,))

    @property
    def leaf(self) -> bool:
        return not self.children

    def walk(self) -> Iterator[QuotaNode]:
        """This queue, then its descendants, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True)
class QuotaTree:
    """The queues, validated when built (raises `QuotaSpecError`)."""

    roots: tuple[QuotaNode, ...]

    def __post_init__(self) -> None:
        validate(self.roots)

    @cached_property
    def _nodes(self) -> dict[str, QuotaNode]:
        return {n.name: n for root in self.roots for n in root.walk()}

    @cached_property
    def _parents(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for root in self.roots:
            for node in root.walk():
                for child in node.children:
                    out[child.name] = node.name
        return out

    @cached_property
    def _tenant_leaf(self) -> dict[str, str]:
        return {t: leaf.name for leaf in self.leaves() for t in leaf.tenants}

    def node(self, name: str) -> QuotaNode | None:
        return self._nodes.get(name)

    def names(self) -> list[str]:
        """Every queue's name, depth first."""
        return list(self._nodes)

    def leaves(self) -> list[QuotaNode]:
        """The leaf queues, depth first."""
        return [n for n in self._nodes.values() if n.leaf]

    def parent(self, name: str) -> str | None:
        return self._parents.get(name)

    def chain(self, name: str) -> list[str]:
        """`name`, its parent, ..., its root."""
        out = [name]
        while (up := self._parents.get(out[-1])) is not None:
            out.append(up)
        return out

    def leaf_for_tenant(self, tenant: str) -> str | None:
        """The leaf listing `tenant`, else the `default` leaf if any, else None."""
        leaf = self._tenant_leaf.get(tenant)
        if leaf is not None:
            return leaf
        node = self._nodes.get(DEFAULT_QUEUE)
        return DEFAULT_QUEUE if node is not None and node.leaf else None

    def leaf_of(self, spec: JobSpec) -> str | None:
        """The leaf queue of a job (the rule in the module docstring); None if the
        job names no leaf of this tree and its tenant matches none."""
        if spec.queue:
            node = self._nodes.get(spec.queue)
            return spec.queue if node is not None and node.leaf else None
        return self.leaf_for_tenant(spec.tenant)

    @cached_property
    def has_limits(self) -> bool:
        """True when some queue has a limit."""
        return any(n.limit is not None for n in self._nodes.values())

    @cached_property
    def per_model(self) -> bool:
        """True when the quotas name GPU models (else plain numbers of any GPU)."""
        return any(not n.guarantee.any_model for n in self._nodes.values())


def validate(roots: tuple[QuotaNode, ...]) -> None:
    """Raise `QuotaSpecError` for the first broken rule: unique queue names, a tenant
    in one leaf only, weight > 0, quotas >= 0, guarantee <= limit, children's
    guarantees within their parent's (and limits within its limit), one quota form."""
    seen: set[str] = set()
    tenants: dict[str, str] = {}
    forms: set[bool] = set()
    for i, root in enumerate(roots):
        _check(root, f"queues[{i}]", seen, tenants, forms)


def _check(
    node: QuotaNode, path: str, seen: set[str], tenants: dict[str, str], forms: set[bool]
) -> None:
    if not node.name:
        raise QuotaSpecError(f"{path}.name", "must not be empty")
    if node.name in seen:
        raise QuotaSpecError(f"{path}.name", f"quota {node.name!r} is defined twice")
    seen.add(node.name)
    if not node.weight > 0:
        raise QuotaSpecError(f"{path}.weight", f"must be > 0, got {node.weight}")
    quotas = [("guarantee", node.guarantee), ("limit", node.limit)]
    for name, quota in quotas:
        if quota is None:
            continue
        for model, gpus in quota.by_model:
            if gpus < 0:
                raise QuotaSpecError(f"{path}.{name}", f"must be >= 0, got {gpus} ({model})")
        if quota.total > 0:
            forms.add(quota.any_model)
        if len(forms) > 1:
            raise QuotaSpecError(
                f"{path}.{name}", "mixes plain GPU counts with per-model quotas in one tree"
            )
    if node.limit is not None:
        for model in node.guarantee.models() | node.limit.models():
            if node.guarantee.get(model) > node.limit.get(model):
                raise QuotaSpecError(
                    f"{path}.limit",
                    f"{node.limit.get(model)} is below the guarantee "
                    f"{node.guarantee.get(model)}" + _model_note(model),
                )
    if node.leaf:
        for tenant in node.tenants:
            if tenant in tenants:
                raise QuotaSpecError(
                    f"{path}.tenants", f"tenant {tenant!r} is already in quota {tenants[tenant]!r}"
                )
            tenants[tenant] = node.name
    elif node.tenants:
        raise QuotaSpecError(f"{path}.tenants", "only a leaf queue (no children) has tenants")
    for model in {m for c in node.children for m in c.guarantee.models()}:
        total = sum(c.guarantee.get(model) for c in node.children)
        if total > node.guarantee.get(model):
            raise QuotaSpecError(
                f"{path}.children",
                f"guarantees add up to {total}, more than the parent's "
                f"{node.guarantee.get(model)}" + _model_note(model),
            )
    for j, child in enumerate(node.children):
        if node.limit is not None and child.limit is not None:
            for model in child.limit.models():
                if child.limit.get(model) > node.limit.get(model):
                    raise QuotaSpecError(
                        f"{path}.children[{j}].limit",
                        f"{child.limit.get(model)} is above the parent's limit "
                        f"{node.limit.get(model)}" + _model_note(model),
                    )
        _check(child, f"{path}.children[{j}]", seen, tenants, forms)


def _model_note(model: str) -> str:
    return "" if model == ANY_MODEL else f" ({model})"
