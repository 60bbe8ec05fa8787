"""An audit event's MAC, computed here, in the application process, and nowhere else.

The database stores and orders the MACs; it never holds the audit key nor anything derived from
it by a fixed transformation (HMAC pads, a hash of the key), so whoever owns it can neither forge
an event nor recover the key by replacing a function (docs/operations.md, Tamper evidence).

An event's MAC is HMAC-SHA256, under the audit key its ``hash_key`` names, of its encoding: each
field as its length in UTF-8 bytes, a colon and its text ("" for none), in a fixed order, the
previous event's MAC first (so a removed or inserted event breaks the link, and re-linking needs
the key), its time as microseconds since 1970, then the times its message names (``ledger.timed``)
as PostgreSQL's jsonb writes them, where it has any, then its lane where it is not 0 (preceded by
the times, "" for none). Events hashed before keys (``hash_key`` "")
have the unkeyed SHA-256 of the same encoding. Until migration 0045 the database computed these
same bytes (``ledger_audit_encoding``), so every event written since chaining began verifies here.

The lane (``ledger.core.audit_chain``) is covered so that it is as much the key holder's word as the
workspace is: an event moved to another lane of its workspace already breaks both lanes' links, but
a whole lane relabelled would still link up and, but for the MAC, only the exported heads would
show it. Lane 0 adds nothing, so the events of before lanes, and of every one-lane workspace, keep
their bytes; a later lane's event always has both trailing fields, so it has more fields than any
lane-0 event and no two events' encodings can be the same bytes.
"""

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

from django.conf import settings

# The fields an event's encoding covers, before its time, in this order.
FIELDS = (
    "prev_hash",
    "workspace_id",
    "operation_id",
    "attempt_id",
    "actor",
    "kind",
    "from_state",
    "to_state",
    "error_category",
    "message",
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def audit_keys() -> dict[str, str]:
    """Every configured audit key by id: the current one and the retired ones still verified."""
    return settings.OPSCONSOLE_AUDIT_OLD_KEYS | {settings.OPSCONSOLE_AUDIT_KEY_ID: settings.OPSCONSOLE_AUDIT_KEY}


def field(value) -> str:
    text = "" if value is None else str(value)
    return f"{len(text.encode())}:{text}"


def micros(moment: datetime | str) -> int:
    """A time as whole microseconds since 1970 (exactly: no float on the way)."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def jsonb_text(value) -> str:
    """``value`` as PostgreSQL writes a jsonb value as text: an object's keys shortest first, then
    by their bytes; ``", "`` and ``": "`` between; strings escaped as JSON with non-ASCII kept.
    Times are strings by name (``ledger.timed``), so only what a ``times`` can hold is written."""
    if isinstance(value, dict):
        names = sorted(value, key=lambda name: (len(name.encode()), name.encode()))
        return (
            "{"
            + ", ".join(f"{json.dumps(name, ensure_ascii=False)}: {jsonb_text(value[name])}" for name in names)
            + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(jsonb_text(item) for item in value) + "]"
    if value is None or isinstance(value, bool | str) or type(value) is int:
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"an audit event's times hold strings, not {type(value).__name__}")


def encoding(row: dict) -> bytes:
    """The bytes an event's MAC covers. ``row`` holds its columns (``workspace_id`` and the other
    ids as numbers or None, ``created_at`` a time or its ISO text); ``times_text``, when given, is
    the times as the database wrote them (verification reads that), else ``times`` is written so."""
    text = "".join(field(row.get(name)) for name in FIELDS) + field(micros(row["created_at"]))
    times = row["times_text"] if "times_text" in row else row.get("times")
    if times is not None and "times_text" not in row:
        times = jsonb_text(times)
    lane = row.get("lane") or 0
    if times is not None or lane:
        text += field(times)
    if lane:
        text += field(lane)
    return text.encode()


def digest(row: dict, key: str | None) -> str:
    """The hash of an event: HMAC-SHA256 under ``key``, or SHA-256 for an event of before keys (None)."""
    if key is None:
        return hashlib.sha256(encoding(row)).hexdigest()
    return hmac.new(key.encode(), encoding(row), hashlib.sha256).hexdigest()


def seal(head: list, rows: list[dict]) -> list[dict]:
    """Chain ``rows`` (one chain's new events, in order) after the chain's ``head``, [its hash ("" for
    a new chain), its time (None)], as ``ledger_chain_head`` read it under the chain's lock: each
    gets ``prev_hash``, ``hash_key`` (the current key's id) and ``hash``, its MAC.

    An event is never in an earlier month (UTC) than the one before it on its chain: a time set
    before the lock was taken, just before a month began, by an appender that another got the lock
    ahead of, moves up to the start of the head's month. So along a chain the months never go back
    and each month's partition of the trail holds one stretch of every chain
    (``ledger.core.audit_partitions``), in which the head is found. Within a month a time stays as
    it was set, whatever the order."""
    previous, head_time = head
    floor = None if head_time is None else month_of(head_time)
    key_id, key = settings.OPSCONSOLE_AUDIT_KEY_ID, settings.OPSCONSOLE_AUDIT_KEY
    for row in rows:
        if floor is not None and micros(row["created_at"]) < micros(floor):
            row["created_at"] = floor
        row["prev_hash"], row["hash_key"] = previous, key_id
        row["hash"] = previous = digest(row, key)
        floor = month_of(row["created_at"])
    return rows


def as_time(moment: datetime | str) -> datetime:
    return datetime.fromisoformat(moment) if isinstance(moment, str) else moment


def month_of(moment: datetime | str) -> datetime:
    """The start of the UTC month ``moment`` is in (the audit trail's partitions are UTC months)."""
    return as_time(moment).astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
