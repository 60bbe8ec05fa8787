"""Appending to the audit trail, and checking it was not rewritten.

Each workspace's events (and the global events, workspace none) form a hash chain: an event's
``hash`` is the HMAC-SHA256, under the audit key its ``hash_key`` names, of its content and of the
previous event's hash. Editing, inserting or deleting a row breaks the chain at that row, and
``verify_chains`` (``manage.py verify_audit``) names the first broken link. The key is never stored
in the database (settings ``OPSCONSOLE_AUDIT_KEY``, passed with each append), so whoever owns the
database, and can turn the append-only triggers off, cannot recompute the hashes after an edit.
Events hashed before keys (``hash_key`` "") keep their unkeyed SHA-256 and verify as such; one after
a keyed event breaks the chain. Only the end of a chain can be cut off unseen: ``ledger.audit_heads``
exports the heads elsewhere and holds the database to them.

Appending locks the chain until the transaction commits, so a chain's events are written one
transaction at a time and their ids increase along it: PostgreSQL with a transaction-scoped
advisory lock per chain, SQLite by its single writer.
"""

import functools
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ledger.models import AuditEvent
from ledger.rows import dumps, model_row

# The high 32 bits of the advisory lock keys of audit chains ("AUDT"), the low ones the workspace id.
_LOCK_NAMESPACE = 0x41554454 << 32
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def append(events: list[AuditEvent]) -> list[AuditEvent]:
    """Chain ``events`` (in this order) onto their workspaces' chains and insert them.

    Callers run it in the transaction of the change the events describe; the chains stay locked
    until that transaction ends.
    """
    if not events:
        return events
    now = timezone.now()
    chains: dict[int | None, list[AuditEvent]] = {}
    for event in events:
        event.created_at = event.created_at or now
        event.hash_key = settings.OPSCONSOLE_AUDIT_KEY_ID
        chains.setdefault(event.workspace_id, []).append(event)
    in_database = connection.vendor == "postgresql"
    with transaction.atomic(savepoint=False):
        # Sorted, so two transactions that append to the same chains cannot deadlock.
        for workspace_id in sorted(chains, key=lambda key: key or 0):
            if in_database:
                _append_in_database(workspace_id, chains[workspace_id])
            else:
                _chain_here(workspace_id, chains[workspace_id])
        if not in_database:
            AuditEvent.objects.bulk_create(events)
    return events


def _chain_here(workspace_id: int | None, events: list[AuditEvent]) -> None:
    """SQLite: hash one chain's events in Python after its head (its single writer is the lock)."""
    previous = (AuditEvent.objects.filter(workspace_id=workspace_id).exclude(hash="")
                .order_by("-id").values_list("hash", flat=True).first() or "")
    for event in events:
        event.prev_hash = previous
        event.hash = event_hash(event)
        previous = event.hash


def _append_in_database(workspace_id: int | None, events: list[AuditEvent]) -> None:
    """One chain's events in one statement (``ledger_audit_append``, migration 0021), which locks
    the chain, hashes the events along it and inserts them; their ids and hashes come back."""
    with connection.cursor() as cursor:
        rows = dumps([keyed(model_row(event)) for event in events])  # the key beside each, for ledger_audit_hash
        cursor.execute("SELECT ledger_audit_append(%s, %s, %s::jsonb)",
                       [chain_lock_key(workspace_id), workspace_id, rows])
        written = json.loads(cursor.fetchone()[0])  # Django's connections leave jsonb as text
    for event, (pk, prev_hash, digest) in zip(events, written, strict=True):
        event.pk, event.prev_hash, event.hash = pk, prev_hash, digest
        event._state.adding, event._state.db = False, connection.alias


def keyed(row: dict) -> dict:
    """An audit event's row (as ``ledger.rows.model_row`` writes it, for a PostgreSQL function to
    insert) to be hashed under the current key: its id, and the secret's HMAC pads beside the
    columns for ``ledger_audit_hash`` (migration 0030). ``jsonb_populate_record`` leaves the pads out
    of the row: they are never stored."""
    ipad, opad = hmac_pads(settings.OPSCONSOLE_AUDIT_KEY)
    return row | {"hash_key": settings.OPSCONSOLE_AUDIT_KEY_ID, "audit_ipad": ipad, "audit_opad": opad}


@functools.lru_cache(maxsize=8)
def hmac_pads(key: str) -> tuple[str, str]:
    """HMAC-SHA256's inner and outer pads of ``key`` (RFC 2104), in hex: the key as UTF-8 (hashed
    first when longer than SHA-256's 64-byte block), zero-filled to 64 bytes, XOR 0x36 and XOR 0x5c.
    ``sha256(opad + sha256(ipad + message))`` is then ``hmac.new(key, message, sha256)``, which the
    database computes with its built-in ``sha256()`` (no pgcrypto). As good as the key to whoever
    reads them: sent like it, as a parameter, never stored."""
    block = key.encode()
    if len(block) > 64:
        block = hashlib.sha256(block).digest()
    block = block.ljust(64, b"\0")
    return bytes(byte ^ 0x36 for byte in block).hex(), bytes(byte ^ 0x5C for byte in block).hex()


def audit_keys() -> dict[str, str]:
    """Every configured audit key by id: the current one and the retired ones still verified."""
    return settings.OPSCONSOLE_AUDIT_OLD_KEYS | {settings.OPSCONSOLE_AUDIT_KEY_ID: settings.OPSCONSOLE_AUDIT_KEY}


class UnknownKey(LookupError):
    pass


def event_hash(event: AuditEvent, keys: dict[str, str] | None = None) -> str:
    """The HMAC-SHA256, under the key ``event.hash_key`` names (of ``keys``, default all configured),
    of the event's content and its predecessor's hash (its id is not part of it); the plain SHA-256
    for an event of before keys (``hash_key`` ""). Raises ``UnknownKey`` for a key not configured.

    Each field is written as its length in UTF-8 bytes, a colon and its text (ids as numbers, ""
    when none, the time as microseconds since 1970), so no two events share an encoding; on
    PostgreSQL, appends compute the same in SQL (``ledger_audit_hash``, migrations 0009 and 0030).
    """
    fields = [event.prev_hash, _text(event.workspace_id), _text(event.operation_id), _text(event.attempt_id),
              event.actor, event.kind, event.from_state, event.to_state, event.error_category, event.message,
              str((event.created_at - _EPOCH) // timedelta(microseconds=1))]
    encoded = "".join(f"{len(value.encode())}:{value}" for value in fields).encode()
    if not event.hash_key:
        return hashlib.sha256(encoded).hexdigest()
    key = (audit_keys() if keys is None else keys).get(event.hash_key)
    if key is None:
        raise UnknownKey(event.hash_key)
    return hmac.new(key.encode(), encoded, hashlib.sha256).hexdigest()


def _text(value) -> str:
    return "" if value is None else str(value)


def chain_lock_key(workspace_id: int | None) -> int:
    """The advisory lock that serialises appends to a workspace's chain (PostgreSQL)."""
    return _LOCK_NAMESPACE | (workspace_id or 0)


@dataclass
class Chain:
    workspace_id: int | None
    events: int = 0
    unchained: int = 0  # events older than the chain (recorded before chaining began)
    head: str = ""


@dataclass
class BrokenLink:
    workspace_id: int | None
    event_id: int
    problem: str


@dataclass
class Verification:
    chains: list[Chain] = field(default_factory=list)
    broken: BrokenLink | None = None


def verify_chains(*, chunk: int = 2000) -> Verification:
    """Walk every chain in id order, recomputing each hash; stops at the first broken link."""
    report = Verification()
    workspace_ids = AuditEvent.objects.order_by().values_list("workspace_id", flat=True).distinct()
    for workspace_id in sorted(set(workspace_ids), key=lambda key: key or 0):
        chain = Chain(workspace_id)
        report.chains.append(chain)
        report.broken = _verify_chain(chain, chunk=chunk)
        if report.broken:
            break
    return report


def _verify_chain(chain: Chain, *, chunk: int) -> BrokenLink | None:
    previous, last_id, keyed, keys = None, 0, False, audit_keys()
    while True:
        rows = list(AuditEvent.objects.filter(workspace_id=chain.workspace_id, id__gt=last_id).order_by("id")[:chunk])
        if not rows:
            return None
        for event in rows:
            last_id = event.id
            chain.events += 1
            if not event.hash:
                if previous is not None:
                    return BrokenLink(chain.workspace_id, event.id, "has no hash, after chained events")
                chain.unchained += 1
                continue
            expected_prev = previous or ""
            if event.prev_hash != expected_prev:
                return BrokenLink(chain.workspace_id, event.id,
                                  "does not follow the event before it (an event was removed or inserted)")
            if keyed and not event.hash_key:
                return BrokenLink(chain.workspace_id, event.id, "is hashed without a key after keyed events "
                                                                "(rewritten by someone without the audit key)")
            keyed = keyed or bool(event.hash_key)
            try:
                expected = event_hash(event, keys)
            except UnknownKey:
                return BrokenLink(chain.workspace_id, event.id, f"is hashed under audit key id {event.hash_key!r}, "
                                  "which is not configured (OPSCONSOLE_AUDIT_KEY_ID, OPSCONSOLE_AUDIT_OLD_KEYS)")
            if expected != event.hash:
                return BrokenLink(chain.workspace_id, event.id, "was changed after it was written")
            previous = chain.head = event.hash
