"""The audit trail's monthly partitions (migration 0061): which there are, and making the next ones.

``ledger_auditevent`` is range-partitioned by ``created_at`` (UTC months, ``ledger_auditevent_pYYYYMM``),
with ``ledger_auditevent_history`` holding what was written before partitioning and a default
partition for an event no month has a partition for. The sweep makes this month's and the next three
months' partitions where missing (``create_ahead``); ``manage.py archive_audit`` takes the oldest
month out to a file (``ledger.core.audit_archive``).
"""

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from ledger.core.partitions import Created, make
from ledger.models import AuditArchive

TABLE = "ledger_auditevent"
DEFAULT = "ledger_auditevent_default"
OF = "audit trail"
HISTORY = "ledger_auditevent_history"

# The partitions of the trail that hold a range of time (not the default): name and bounds.
_PARTITIONS = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = %s::regclass AND NOT c.relpartbound IS NULL AND c.relname <> %s
"""


@dataclass(frozen=True)
class Partition:
    name: str
    starts: datetime | None  # None: from the beginning (the history)
    ends: datetime


def partitions() -> list[Partition]:
    """The trail's partitions of a range of time, oldest first (the default partition is not one)."""
    with connection.cursor() as cursor:
        cursor.execute(_PARTITIONS, [TABLE, DEFAULT])
        found = [_partition(name, bound) for name, bound in cursor.fetchall()]
    return sorted(found, key=lambda part: part.ends)


def _partition(name: str, bound: str) -> Partition:
    # FOR VALUES FROM ('2027-01-01 00:00:00+00') TO ('2027-02-01 00:00:00+00'), or FROM (MINVALUE)
    lower, upper = (part.split("(", 1)[1].rstrip(")").strip("'") for part in bound.split(" TO "))
    return Partition(name, None if lower == "MINVALUE" else _time(lower), _time(upper))


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace(" ", "T"))


def archived_until() -> datetime | None:
    """The end of the newest month archived to a file (``manage.py archive_audit``): the trail in
    the database begins there. None before any archive."""
    return AuditArchive.objects.order_by("-ends").values_list("ends", flat=True).first()


def create_ahead() -> Created:
    """This month's partition and the next three months', where missing (the sweep, as any role)."""
    return make("SELECT ledger_audit_partitions_ahead()", [], of=OF)


def ensure_range(start: datetime, end: datetime) -> Created:
    """The partitions of every month from ``start``'s to ``end``'s, where missing (as the owner:
    the bench's load of past months, a restore)."""
    months = (end.year - start.year) * 12 + end.month - start.month + 1
    return make("SELECT ledger_audit_partitions(%s, %s)", [start, months], of=OF)
