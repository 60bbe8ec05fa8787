"""Which destinations (and internal actions) are working, for the whole cluster.

A claimed batch goes one operation at a time until one succeeds, so that a destination that is
failing meets one call, not a pool of doomed ones (``ledger.engine.processing``). A destination whose last
batches all succeeded within ``WORKING_WINDOW``, on any worker, with no failure since, is working:
its next batch goes wide at once. So a destination that goes down after being quiet for less than
the window costs one pool's worth of calls, once: their failure makes it cold for every worker.
Each is one row (``DestinationHealth``), read once per group of a batch and written at most once
per ``RESOLUTION`` per outcome, so a busy destination costs a write every few seconds, not one per
batch.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from ledger.models import DestinationHealth

WORKING_WINDOW = timedelta(minutes=5)
RESOLUTION = timedelta(seconds=10)


@dataclass(frozen=True)
class Health:
    name: str
    known: bool
    last_ok_at: datetime | None = None
    last_failure_at: datetime | None = None

    def working(self, now: datetime) -> bool:
        return (
            self.last_ok_at is not None
            and self.last_ok_at >= now - WORKING_WINDOW
            and (self.last_failure_at is None or self.last_failure_at < self.last_ok_at)
        )


def health_of(name: str) -> Health:
    row = DestinationHealth.objects.filter(name=name).values_list("last_ok_at", "last_failure_at").first()
    return Health(name, known=False) if row is None else Health(name, True, *row)


def record(health: Health, *, ok: bool, now: datetime | None = None) -> None:
    """Note how a batch fared: all succeeded (``ok``) or not. Skipped when the same was noted
    within ``RESOLUTION`` (as read in ``health``) and nothing else changed since."""
    now = now or timezone.now()
    field = "last_ok_at" if ok else "last_failure_at"
    noted = health.last_ok_at if ok else health.last_failure_at
    if health.known and noted is not None and noted >= now - RESOLUTION and health.working(now) == ok:
        return
    if health.known:
        DestinationHealth.objects.filter(name=health.name).update(**{field: now})
    else:  # another worker may create it at the same moment: advisory, either note will do
        DestinationHealth.objects.bulk_create(
            [DestinationHealth(name=health.name, **{field: now})], ignore_conflicts=True
        )
