"""The quota tree an admin defines over REST, as the API keeps it: a flat list of
quotas (`Item`, the loader's form, controller.quotas.spec), checked as the whole tree
each change makes, and the job database's table `queues` (its name from before the
word was quotas; a migration would rename it) that holds it in local mode.
Called by api/routes/quotas.py (REST) and api/local_mode/backend.py (which hands the tree to
the LiveCluster each time it changes); api/quotas/store.py keeps it as Quota resources
in cluster mode.

Every change is checked by the loader replays and the operator use: a change that
breaks a rule is refused with the field it broke, as `<quota>.<field>` when the fault
is in another quota (a parent's guarantee the children now exceed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.store.models import QueueRecord
from controller.model.quotas import QuotaSpecError, QuotaTree
from controller.quotas.spec import quotas_from_data

Item = dict[str, Any]  # a quota as the loader's flat list holds it (controller.quotas.spec)


class QuotaStore(Protocol):
    def items(self) -> list[Item]:
        """Every quota, by name."""
        ...

    def put(self, item: Item) -> bool:
        """Create or replace the quota `item["name"]`; True when it was created."""
        ...

    def delete(self, name: str) -> bool:
        """Delete the quota; False when there was none."""
        ...


class TreeError(ValueError):
    """A change refused: `field` is the body field at fault (or `<quota>.<field>`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def checked_tree(items: list[Item], changed: str) -> QuotaTree | None:
    """The tree `items` make (None for no quotas); raise TreeError naming the field."""
    if not items:
        return None
    ordered = sorted(items, key=lambda i: str(i["name"]))
    try:
        return quotas_from_data(ordered)
    except QuotaSpecError as exc:
        raise TreeError(*_field(exc, ordered, changed)) from None


def _field(exc: QuotaSpecError, items: list[Item], changed: str) -> tuple[str, str]:
    head, _, rest = exc.field.partition(".")
    if not head.startswith("queues[") or not head.endswith("]"):
        return exc.field, exc.message
    name = str(items[int(head[len("queues[") : -1])]["name"])
    rest = rest or "name"
    if rest.startswith("children"):
        rest = "guarantee"  # the children's guarantees exceed this quota's
    return (rest if name == changed else f"{name}.{rest}"), exc.message


def with_change(items: list[Item], item: Item | None, name: str) -> list[Item]:
    """`items` with quota `name` replaced by `item` (or removed when None)."""
    out = [i for i in items if i["name"] != name]
    return [*out, item] if item is not None else out


class DbQuotaStore:
    """Local mode: the table `queues` (api.store.models.QueueRecord)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def items(self) -> list[Item]:
        rows = self.session.scalars(select(QueueRecord).order_by(QueueRecord.name))
        return [_item_of_row(r) for r in rows]

    def put(self, item: Item) -> bool:
        row = self.session.get(QueueRecord, item["name"])
        created = row is None
        if row is None:
            row = QueueRecord(name=item["name"])
            self.session.add(row)
        row.parent = item.get("parent")
        row.guarantee = item.get("guarantee")
        row.limit = item.get("limit")
        row.weight = float(item.get("weight", 1.0))
        row.tenants = list(item.get("tenants") or [])
        self.session.commit()
        return created

    def delete(self, name: str) -> bool:
        row = self.session.get(QueueRecord, name)
        if row is None:
            return False
        self.session.delete(row)
        self.session.commit()
        return True


def _item_of_row(row: QueueRecord) -> Item:
    item: Item = {"name": row.name, "weight": row.weight, "tenants": list(row.tenants)}
    for key, value in (("parent", row.parent), ("guarantee", row.guarantee), ("limit", row.limit)):
        if value is not None:
            item[key] = value
    return item


def clean(item: Mapping[str, Any]) -> Item:
    """An item without the fields left unset (None), as both stores keep it."""
    return {k: v for k, v in item.items() if v is not None and (k != "tenants" or v)}
