"""Reads of the reconciliation audit's results for the console's dashboard."""

from dataclasses import dataclass

from django.db.models import Count

from ledger.core import roles
from reconciliation.models import Mismatch, ReconciliationRun

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
