"""Arrivals at a source's hook that nothing shows are its sender's: a signature missing, wrong or
stale, a body refused before its signature could be checked, an endpoint verification challenge.
Anyone can send these as fast as they like, so none is a delivery row of its own: each is counted
in one row per source, client address, reason and hour (``ledger.models.HookRefusal``), which the
deliveries page shows as "Refused 200 times from 10.0.0.1". Once a signature is good the sender is
known, and what becomes of its delivery is recorded as any other (``ledger.intake.sources``).
"""

import ipaddress
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Max, Min, Sum
from django.utils import timezone

from ledger.core import roles
from ledger.intake.submit import IntakeResult
from ledger.models import Delivery, HookRefusal, Source

CHALLENGE = "challenge"  # the reason a challenge is counted under (answered, but anyone may send one)
SHOWN_DAYS = 7  # how far back the deliveries page adds the counts up


def refuse_unverified(
    source: Source, *, address: str, reason: str, errors: list[dict], http_status: int, extra: dict | None = None
) -> IntakeResult:
    """Count a refused arrival at ``source`` from ``address``, and answer it as intake answers a
    refusal. One statement, committed on its own (no caller's transaction is open in a hook)."""
    count_arrival(source, address=address, reason=reason)
    return IntakeResult(
        outcome=Delivery.Outcome.INVALID, http_status=http_status, reason=reason, errors=errors, extra=extra or {}
    )


def count_arrival(source: Source, *, address: str, reason: str, now: datetime | None = None) -> None:
    """Add one to the count of ``reason`` from ``address`` at ``source`` in this hour. An upsert that,
    when the hour's row is there, changes only unindexed columns (a HOT update: see the model)."""
    now = now or timezone.now()
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {HookRefusal._meta.db_table} AS counted
                (source_id, address, reason, hour, count, first_seen, last_seen)
            VALUES (%s, %s, %s, %s, 1, %s, %s)
            ON CONFLICT ON CONSTRAINT hook_refusal_unique_hour DO UPDATE
            SET count = counted.count + 1, last_seen = greatest(counted.last_seen, excluded.last_seen)
            """,
            [source.pk, counted_address(address), reason[:40], hour, now, now],
        )


def counted_address(address: str) -> str:
    """The address a refusal is counted under: an IPv6 address as its /64 (one host sends from a
    whole /64), an IPv4 one as itself, whatever else came (no proxy's address) as it came."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if ip.version == 6 and ip.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(getattr(ip, "ipv4_mapped", None) or ip)


def recent(user, *, workspace=None, limit: int = 20) -> list[dict]:
    """The counts of the last ``SHOWN_DAYS`` in ``user``'s workspaces (or one of them), added up per
    source, address and reason, the most recent first."""
    rows = roles.visible(HookRefusal.objects.all(), user, via="source__workspace").filter(
        hour__gte=timezone.now() - timedelta(days=SHOWN_DAYS)
    )
    if workspace is not None:
        rows = rows.filter(source__workspace=workspace)
    return list(
        rows.values("source__slug", "source__workspace__slug", "address", "reason")
        .annotate(total=Sum("count"), first_seen=Min("first_seen"), last_seen=Max("last_seen"))
        .order_by("-last_seen")[:limit]
    )
