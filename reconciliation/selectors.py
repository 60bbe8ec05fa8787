"""Reads of the reconciliation audit's results for the console: the dashboard's counts, and the
open mismatches as a work list (filtered, counted, each with its latest bulk lookup's answer)."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, OuterRef, QuerySet, Subquery

from ledger.core import roles
from ledger.models import BulkAction, BulkItem
from reconciliation.models import Mismatch, ReconciliationRun

# The age filter: found within, or longer ago than, a span.
AGES = {
    "hour": ("found in the last hour", timedelta(hours=1), True),
    "day": ("found in the last 24 hours", timedelta(hours=24), True),
    "older": ("found more than 24 hours ago", timedelta(hours=24), False),
    "week": ("found more than 7 days ago", timedelta(days=7), False),
}
# The lookup filter: what the latest bulk lookup since the mismatch was found answered.
LOOKUPS = {
    "none": "not looked up yet",
    BulkItem.Outcome.FOUND: "found at the destination",
    BulkItem.Outcome.ABSENT: "confirmed absent",
    BulkItem.Outcome.SKIPPED: "the destination could not tell",
}

RECENT_RUNS = 5
COUNT_CAP = 10_000


@dataclass
class Results:
    runs: list[ReconciliationRun]  # the latest first
    open_mismatches: dict[str, int]  # by kind, every kind; each counted up to COUNT_CAP in all
    capped: bool

    @property
    def open_total(self) -> int:
        """All open mismatches, at most COUNT_CAP (``capped``: there are more)."""
        return min(sum(self.open_mismatches.values()), COUNT_CAP)

    @property
    def open_by_kind(self) -> list[tuple[str, str, int]]:
        """Each kind as (kind, the label pages give it, its count): "Missing at destination", not the code."""
        return [(kind, Mismatch.Kind(kind).label, count) for kind, count in self.open_mismatches.items()]


def results(user) -> Results:
    """The latest audit runs and the open mismatches of the workspaces ``user`` may see, by kind
    (two queries). The open ones are read through ``mismatch_open_page_idx``, at most
    ``COUNT_CAP + 1`` of them."""
    visible = roles.visible(Mismatch.objects.filter(status=Mismatch.Status.OPEN), user)
    bounded = Mismatch.objects.filter(pk__in=visible.order_by("-created_at", "-id").values("pk")[: COUNT_CAP + 1])
    counts = dict(bounded.values("kind").annotate(n=Count("pk")).order_by().values_list("kind", "n"))
    return Results(
        runs=list(ReconciliationRun.objects.order_by("-started_at", "-id")[:RECENT_RUNS]),
        open_mismatches={kind: counts.get(kind, 0) for kind in Mismatch.Kind.values},
        capped=sum(counts.values()) > COUNT_CAP,
    )


@dataclass(frozen=True)
class MismatchFilter:
    kind: str = ""
    action: str = ""
    destination: str = ""
    age: str = ""
    lookup: str = ""

    def of_every_kind(self) -> "MismatchFilter":
        """The same filter but for its kind (what the kind tabs count)."""
        return MismatchFilter(action=self.action, destination=self.destination, age=self.age, lookup=self.lookup)


def open_mismatches(user, chosen: MismatchFilter, *, now: datetime) -> QuerySet:
    """The open mismatches of the workspaces ``user`` may see that ``chosen`` keeps, each with
    ``lookup`` and ``lookup_detail``: the outcome of the latest bulk lookup of its operation made
    since it was found (blank before any)."""
    listed = with_lookup(roles.visible(Mismatch.objects.filter(status=Mismatch.Status.OPEN), user))
    for name in ("kind", "action", "destination"):
        if value := getattr(chosen, name):
            listed = listed.filter(**{name: value})
    if chosen.age in AGES:
        _, span, within = AGES[chosen.age]
        listed = listed.filter(**{"created_at__gte" if within else "created_at__lt": now - span})
    if chosen.lookup == "none":
        listed = listed.filter(lookup__isnull=True)
    elif chosen.lookup in LOOKUPS:
        listed = listed.filter(lookup=chosen.lookup)
    return listed


def with_lookup(mismatches: QuerySet) -> QuerySet:
    latest = BulkItem.objects.filter(
        operation_id=OuterRef("operation_id"),
        bulk_action__kind=BulkAction.Kind.LOOKUP,
        created_at__gte=OuterRef("created_at"),
    ).order_by("-created_at", "-id")
    return mismatches.annotate(
        lookup=Subquery(latest.values("outcome")[:1]), lookup_detail=Subquery(latest.values("detail")[:1])
    )


def counts_by_kind(mismatches: QuerySet) -> tuple[dict[str, int], bool]:
    """How many of ``mismatches`` there are of each kind (every kind), at most ``COUNT_CAP`` in
    all; and whether there are more."""
    bounded = Mismatch.objects.filter(pk__in=mismatches.order_by().values("pk")[: COUNT_CAP + 1])
    counts = dict(bounded.values("kind").annotate(n=Count("pk")).order_by().values_list("kind", "n"))
    return {kind: counts.get(kind, 0) for kind in Mismatch.Kind.values}, sum(counts.values()) > COUNT_CAP


def filter_choices(user) -> dict[str, list[str]]:
    """The actions and destinations the person's open mismatches name (a short list: an
    installation has tens of actions)."""
    visible = roles.visible(Mismatch.objects.filter(status=Mismatch.Status.OPEN), user).order_by()
    return {
        "action": sorted(set(visible.exclude(action="").values_list("action", flat=True).distinct())),
        "destination": sorted(set(visible.exclude(destination="").values_list("destination", flat=True).distinct())),
    }
