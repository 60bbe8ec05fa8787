"""An approver's work list: the operations awaiting approval in the workspaces where the person
may approve, oldest first (the order their approval windows run out), with the people behind each;
their amounts totalled per currency; and which one is next after a decision.

Reads ``operation_state_arrival_idx`` (state, created_at, id; partial on the states that need a
person): a page is one range of it. The people behind a page's operations are one more query (the
console prefetches ``people_behind``), the totals one query per money field of the actions, over
at most ``TOTAL_CAP`` operations, however many await.

Everyone who may approve may also see sensitive values (``ledger.core.roles``): an amount an
approver totals is one they may read.
"""

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import BigIntegerField, Prefetch, QuerySet, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from ledger.actions import registry
from ledger.core import roles
from ledger.models import Contribution, Operation
from ledger.states import State

# Past this many awaiting operations, totals and the count cover the oldest TOTAL_CAP ("10,000+").
TOTAL_CAP = 10_000


def awaiting(user) -> QuerySet:
    """The operations awaiting approval where ``user`` may approve, oldest first."""
    operations = Operation.objects.filter(state=State.PENDING_APPROVAL).select_related("workspace")
    return roles.visible(operations, user, capability=roles.APPROVE).order_by("created_at", "pk")


def people_behind() -> Prefetch:
    """The contributions (submitted, changed, replayed) of each listed operation, with their people."""
    return Prefetch("contributions", queryset=Contribution.objects.select_related("user").order_by("created_at", "pk"))


def next_for(user) -> Operation | None:
    """The oldest operation awaiting approval that ``user`` may decide: in a workspace where they may
    approve, and none of their own work (four eyes). What a person lands on after a decision."""
    return awaiting(user).exclude(contributions__user=user).first()


@dataclass(frozen=True)
class Totals:
    """Sums of the awaiting amounts, in minor units per currency code, over ``counted`` operations;
    ``capped``: more await than were counted (``TOTAL_CAP``)."""

    by_currency: dict[str, int]
    counted: int
    capped: bool


def totals(queryset: QuerySet, *, cap: int = TOTAL_CAP) -> Totals:
    """The amounts of ``queryset``'s oldest ``cap`` operations summed per currency: each action's
    ``money_fields`` (an amount in minor units, the field naming its currency). A value that is no
    whole number (redacted) is left out."""
    oldest = queryset.order_by("created_at", "pk").values("pk")
    counted = oldest[: cap + 1].count()  # a count of an index range, bounded
    in_scope = Operation.objects.filter(pk__in=oldest[:cap])
    by_pair = defaultdict(list)  # (amount field, currency field) -> the actions that declare it
    for name, action in registry.items():
        for amount, currency in action.money_fields.items():
            by_pair[(amount, currency)].append(name)
    sums: dict[str, int] = defaultdict(int)
    for (amount, currency), actions in sorted(by_pair.items()):
        rows = (
            in_scope.filter(action__in=actions, **{f"payload__{amount}__regex": r"^-?[0-9]+$"})
            .values(code=KT(f"payload__{currency}"))
            .annotate(total=Sum(Cast(KT(f"payload__{amount}"), BigIntegerField())))
            .order_by()
        )
        for row in rows:
            sums[row["code"]] += row["total"]
    return Totals(by_currency=dict(sorted(sums.items())), counted=min(counted, cap), capped=counted > cap)
