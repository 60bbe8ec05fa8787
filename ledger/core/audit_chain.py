"""Appending to the audit trail, and checking it was not rewritten.

Each workspace's events (and the global events, workspace none) form a hash chain: an event's
``hash`` is the HMAC-SHA256, under the audit key its ``hash_key`` names, of its content and of the
previous event's hash. Editing, inserting or deleting a row breaks the chain at that row, and
``verify_chains`` (``manage.py verify_audit``) names the first broken link. The key is never stored
in the database (settings ``OPSCONSOLE_AUDIT_KEY``, passed with each append), so whoever owns the
database, and can turn the append-only triggers off, cannot recompute the hashes after an edit.
Events hashed before keys (``hash_key`` "") keep their unkeyed SHA-256 and verify as such; one after
a keyed event breaks the chain. Only the end of a chain can be cut off unseen: ``ledger.core.audit_heads``
exports the heads elsewhere and holds the database to them.

Hashing exists once, in the database (``ledger_audit_hash``, migrations 0009 and 0030): appends
(``ledger_audit_append`` and the functions that append in SQL) and ``verify_chains`` call it with
the same JSON row, the event's columns and the key beside them (``keyed``, ``key_fields``).

Appending locks the chain until the transaction commits (a transaction-scoped advisory lock per
chain), so a chain's events are written one transaction at a time and their ids increase along it.
"""

import functools
import hashlib
import json
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ledger.core.rows import dumps, model_row
from ledger.models import AuditEvent

# The high 32 bits of the advisory lock keys of audit chains ("AUDT"), the low ones the workspace id.
_LOCK_NAMESPACE = 0x41554454 << 32


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
    with transaction.atomic(savepoint=False):
        # Sorted, so two transactions that append to the same chains cannot deadlock.
        for workspace_id in sorted(chains, key=lambda key: key or 0):
            _append_in_database(workspace_id, chains[workspace_id])
    return events


def _append_in_database(workspace_id: int | None, events: list[AuditEvent]) -> None:
    """One chain's events in one statement (``ledger_audit_append``, ``sql/audit_append.sql``), which
    locks the chain, hashes the events along it and inserts them; their ids and hashes come back."""
    with connection.cursor() as cursor:
        rows = dumps([keyed(model_row(event)) for event in events])  # the key beside each, for ledger_audit_hash
        cursor.execute(
            "SELECT ledger_audit_append(%s, %s, %s::jsonb)", [chain_lock_key(workspace_id), workspace_id, rows]
        )
        written = json.loads(cursor.fetchone()[0])  # Django's connections leave jsonb as text
    for event, (pk, prev_hash, digest) in zip(events, written, strict=True):
        event.pk, event.prev_hash, event.hash = pk, prev_hash, digest
        event._state.adding, event._state.db = False, connection.alias


def keyed(row: dict) -> dict:
    """An audit event's row (as ``ledger.core.rows.model_row`` writes it, for a PostgreSQL function to
    insert) to be hashed under the current key: its id, and the secret's HMAC pads beside the
    columns for ``ledger_audit_hash`` (``sql/audit_hash.sql``)."""
    return row | key_fields(settings.OPSCONSOLE_AUDIT_KEY_ID)


def key_fields(key_id: str) -> dict:
    """What travels beside an event's columns for ``ledger_audit_hash`` to hash it under the audit
    key ``key_id`` names (one of ``audit_keys``): the key's HMAC pads. ``jsonb_populate_record``
    leaves them out of the row: they are never stored. Appends and ``verify_chains`` both send
    them, so an event is hashed the same way when it is written and when it is checked."""
    ipad, opad = hmac_pads(audit_keys()[key_id])
    return {"hash_key": key_id, "audit_ipad": ipad, "audit_opad": opad}


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


# One chunk of a chain in id order, each event with the hash the database computes for it now
# (``expected``): ``ledger_audit_hash`` of its row and, beside it, the fields of the key its
# ``hash_key`` names (%(keys)s: ``key_fields`` of every configured key, by id); ``known`` is false,
# and nothing is hashed, for a key not configured. Events of before chaining have no hash. The row
# is built in the inner query, once: ledger_audit_hash is inlined, and an expression given to it
# is computed again for each field it reads (a chain of 20,000 events took 3.3 s to verify, not 1.3 s).
_CHUNK = """
SELECT id, prev_hash, hash, hash_key, known, CASE WHEN hash <> '' AND known THEN ledger_audit_hash(event) END
FROM (SELECT e.id, e.prev_hash, e.hash, e.hash_key,
             e.hash_key = '' OR (%(keys)s::jsonb -> e.hash_key) IS NOT NULL AS known,
             to_jsonb(e) || coalesce(%(keys)s::jsonb -> e.hash_key, '{}') AS event
      FROM ledger_auditevent e
      WHERE {chain} AND e.id > %(after)s ORDER BY e.id LIMIT %(chunk)s) AS chunk
ORDER BY id
"""


@dataclass
class _Link:
    id: int
    prev_hash: str
    hash: str
    hash_key: str
    known: bool
    expected: str | None


def _chunks(workspace_id: int | None, *, chunk: int):
    """The chain's events with their expected hashes, ``chunk`` at a time, in id order."""
    keys = dumps({key_id: key_fields(key_id) for key_id in audit_keys()})
    # Two forms, so that each reads the chain's index (workspace, id).
    sql = _CHUNK.replace("{chain}", "e.workspace_id IS NULL" if workspace_id is None else "e.workspace_id = %(chain)s")
    after = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(sql, {"keys": keys, "chain": workspace_id, "after": after, "chunk": chunk})
            links = [_Link(*row) for row in cursor.fetchall()]
        if not links:
            return
        yield links
        after = links[-1].id


def _verify_chain(chain: Chain, *, chunk: int) -> BrokenLink | None:
    previous, keyed_before = None, False
    for links in _chunks(chain.workspace_id, chunk=chunk):
        for link in links:
            chain.events += 1
            if not link.hash:
                if previous is not None:
                    return BrokenLink(chain.workspace_id, link.id, "has no hash, after chained events")
                chain.unchained += 1
                continue
            if link.prev_hash != (previous or ""):
                return BrokenLink(
                    chain.workspace_id,
                    link.id,
                    "does not follow the event before it (an event was removed or inserted)",
                )
            if keyed_before and not link.hash_key:
                return BrokenLink(
                    chain.workspace_id,
                    link.id,
                    "is hashed without a key after keyed events (rewritten by someone without the audit key)",
                )
            keyed_before = keyed_before or bool(link.hash_key)
            if not link.known:
                return BrokenLink(
                    chain.workspace_id,
                    link.id,
                    f"is hashed under audit key id {link.hash_key!r}, "
                    "which is not configured (OPSCONSOLE_AUDIT_KEY_ID, OPSCONSOLE_AUDIT_OLD_KEYS)",
                )
            if link.expected != link.hash:
                return BrokenLink(chain.workspace_id, link.id, "was changed after it was written")
            previous = chain.head = link.hash
    return None
