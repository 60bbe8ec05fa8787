"""Arrivals at a source's hook that nothing shows are its sender's: a signature missing, wrong or
stale, a body refused before its signature could be checked, an endpoint verification challenge.
Anyone can send these as fast as they like, so none is a delivery row of its own: each is counted
in one row per source, client address, reason and hour (``ledger.models.HookRefusal``), which the
deliveries page shows as "Refused 200 times from 10.0.0.1". The rows are bounded: addresses are
counted without their port, an IPv6 one as its /48, anything else as one unknown address, and past
``ADDRESSES_PER_HOUR`` addresses at a source in an hour the others are counted together. Once a
signature is good the sender is known, and what becomes of its delivery is recorded as any other
(``ledger.integrations.sources``).
"""

import ipaddress
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Max, Min, Sum
from django.utils import timezone

from ledger.core import roles
from ledger.intake.submit import IntakeResult
from ledger.models import Delivery, HookRefusal, Source

CHALLENGE = "challenge"  # the reason a challenge is counted under (answered, but anyone may send one)
SHOWN_DAYS = 7  # how far back the deliveries page adds the counts up
# At most this many addresses counted apart at a source in an hour: the rest are counted together,
# under OTHERS (a sender of many addresses cannot write a row each).
ADDRESSES_PER_HOUR = 100
OTHERS = "other addresses"
UNKNOWN = ""  # whatever does not read as an address (the deliveries page: "an unknown address")


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
    """Add one to the count of ``reason`` from ``address`` at ``source`` in this hour: under the
    address as counted (``counted_address``), or, when ``ADDRESSES_PER_HOUR`` others are already
    counted at the source this hour, under ``OTHERS``. One statement: an upsert that, when the
    hour's row is there, changes only unindexed columns (a HOT update: see the model). Two arrivals
    from new addresses at the same moment may both see room for one more: the bound is
    ``ADDRESSES_PER_HOUR`` and the arrivals in flight together, not more."""
    now = now or timezone.now()
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    values: dict[str, Any] = {
        "source": source.pk,
        "address": counted_address(address),
        "reason": reason[:40],
        "hour": hour,
        "now": now,
        "limit": ADDRESSES_PER_HOUR,
        "others": OTHERS,
    }
    table = HookRefusal._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH this_hour AS (
                SELECT count(DISTINCT address) AS addresses, bool_or(address = %(address)s) AS seen
                FROM {table} WHERE source_id = %(source)s AND hour = %(hour)s
            )
            INSERT INTO {table} AS counted (source_id, address, reason, hour, count, first_seen, last_seen)
            SELECT %(source)s,
                   CASE WHEN this_hour.seen OR this_hour.addresses < %(limit)s THEN %(address)s ELSE %(others)s END,
                   %(reason)s, %(hour)s, 1, %(now)s, %(now)s
            FROM this_hour
            ON CONFLICT ON CONSTRAINT hook_refusal_unique_hour DO UPDATE
            SET count = counted.count + 1, last_seen = greatest(counted.last_seen, excluded.last_seen)
            """,
            values,
        )


def counted_address(address: str) -> str:
    """The address a refusal is counted under: an IPv4 one as itself, an IPv6 one as its /48 (one
    sender may hold a whole /48 to send from: 65,536 networks of /64), without the port a proxy
    may have written after it ("10.0.0.1:40001", "[2001:db8::1]:443"); ``UNKNOWN`` for whatever
    does not read as an address (a client's own words, each of which would be a row)."""
    ip = _address_in(address.strip())
    if ip is None:
        return UNKNOWN
    if ip.version == 6 and ip.ipv4_mapped is None:
        return str(ipaddress.ip_network((ip, 48), strict=False))
    return str(getattr(ip, "ipv4_mapped", None) or ip)


# "host:port" or "[host]:port" (a port some proxies write after the address), or "[host]".
_WITH_PORT = re.compile(r"(?:\[(?P<v6>[^\]]+)\]|(?P<v4>[^:\[\]]+))(?::\d{1,5})?")


def _address_in(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        pass
    written = _WITH_PORT.fullmatch(address)
    if written is None:
        return None
    try:
        return ipaddress.ip_address(written["v6"] or written["v4"])
    except ValueError:
        return None


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
