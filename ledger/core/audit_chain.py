"""Appending to the audit trail.

Each workspace's events (and the global events, workspace none) form chains: an event's ``hash``
is its MAC (``ledger.core.audit_mac``), which covers the previous event's on its chain, computed
here in the application process under ``OPSCONSOLE_AUDIT_KEY`` and inserted as data. The database
guards the order: an append locks its chain until the transaction commits (a transaction-scoped
advisory lock per chain, taken last: docs/architecture.md, Lock order) and reads the chain's head
under that lock, so a chain's events are written one transaction at a time and their ids increase
along it. Neither the key nor anything derived from it is ever sent in SQL.
``ledger.core.audit_verify`` (``manage.py verify_audit``) recomputes every MAC in its own process
from the rows' columns.

A workspace has one chain, or more for a large tenant (``Workspace.audit_lanes``): its lanes, each
a chain of its own with its own lock, so that appends to different lanes run at once. An event
goes to its operation's lane, a stable hash of the operation's id (``ledger_audit_lane``), and an
event of no operation to lane 0, which is the chain every workspace had before lanes. Changing the
lane count is safe at any time: an operation's later events may then go to another lane, where
they chain after that lane's head; verification walks each lane on its own, whatever its events'
operations.

An append is two statements in the caller's transaction: the heads of the lanes its events go to,
locked in order (``ledger_audit_head``, also called within ``ledger_reserve``,
``ledger_reserve_one``, ``ledger_claim``, ``ledger_report_outcome`` and ``ledger_finish_claimed``,
which return the events they would write with the heads they read, by lane), then the sealed events
inserted (``insert``, ``ledger_audit_insert``).
"""

import json
from functools import lru_cache
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ledger.core import audit_mac
from ledger.core.rows import dumps, model_row
from ledger.models import AuditEvent

# Sealed events, inserted in one statement in the order given (their ids, assigned under their
# chains' locks, increase along each chain): ``sql/audit_insert.sql``.
INSERT = "SELECT ledger_audit_insert(%s::jsonb)"


def append(events: list[AuditEvent]) -> list[AuditEvent]:
    """Chain ``events`` (in this order) onto their workspaces' chains (each on its operation's lane)
    and insert them.

    Callers run it in the transaction of the change the events describe; the chains stay locked
    until that transaction ends.
    """
    if not events:
        return events
    now = timezone.now()
    chains: dict[int | None, list[AuditEvent]] = {}
    for event in events:
        event.created_at = event.created_at or now
        chains.setdefault(event.workspace_id, []).append(event)
    with transaction.atomic(savepoint=False):
        # Sorted (and each workspace's lanes by ledger_audit_head), so two transactions that append to
        # the same chains cannot deadlock.
        for workspace_id in sorted(chains, key=lambda key: key or 0):
            _append_chain(workspace_id, chains[workspace_id])
    return events


def _append_chain(workspace_id: int | None, events: list[AuditEvent]) -> None:
    """Lock the workspace's lanes the events go to and read their heads, with the events' lanes and
    new ids (``ledger_audit_head``); seal, insert."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ledger_audit_head(%s, %s::bigint[], false)",
            [workspace_id, [event.operation_id for event in events]],
        )
        answer = json.loads(cursor.fetchone()[0])  # Django's connections leave jsonb as text
    rows = [
        model_row(event) | {"id": pk, "lane": lane}
        for event, pk, lane in zip(events, answer["ids"], answer["lanes"], strict=True)
    ]
    insert(answer["heads"], rows)
    for event, row in zip(events, rows, strict=True):
        event.pk, event.lane, event.prev_hash, event.hash, event.hash_key = (
            row["id"],
            row["lane"],
            row["prev_hash"],
            row["hash"],
            row["hash_key"],
        )
        event.created_at = audit_mac.as_time(row["created_at"])  # perhaps moved up a month (audit_mac.seal)
        event._state.adding, event._state.db = False, connection.alias


def insert(heads: dict, rows: list[dict]) -> None:
    """Seal one workspace's new events (rows with their lanes and ids, in order) after their lanes'
    ``heads`` and insert them; the caller holds the lanes' locks (it read ``heads`` under them)."""
    if rows:
        with connection.cursor() as cursor:
            cursor.execute(INSERT, [sealed(heads, rows)])


def sealed(heads: dict, rows: list[dict]) -> str:
    """One workspace's new events, each lane's sealed in order after its head (``heads``: {"<lane>":
    [hash, time]}, as ``ledger_audit_head`` answers), as the JSON ``INSERT`` takes."""
    lanes: dict[int, list[dict]] = {}
    for row in rows:
        lanes.setdefault(row["lane"], []).append(row)
    for lane, chain in lanes.items():
        audit_mac.seal(heads[str(lane)], chain)
    return dumps(rows)


@lru_cache(maxsize=1024)
def event_row(workspace_id: int | None, actor: str) -> dict:
    """An audit event's row as Django would write it (every column), for one actor in one
    workspace: built once per process, each event then setting what it says (a copy: ``row |
    {...}``) and the function that writes it its id, before it is sealed."""
    return model_row(AuditEvent(workspace_id=workspace_id, actor=actor))


def in_one_transaction(call: str, arguments: list, events_of, *, then=None) -> Any:
    """``call`` (a function returning jsonb, with the chains locked) and the audit events
    ``events_of(answer)`` seals (None: nothing to insert, a bare COMMIT) as one transaction in two
    round trips: BEGIN sent with the call, the events with the COMMIT (Django binds parameters on
    the client, so each pair is one query). ``transaction.atomic()`` would send BEGIN and COMMIT on
    their own, two more round trips (intake was ~1.6x slower in-process). Anything that fails in
    between rolls the transaction back (a no-op when the failure ended it, as a failed COMMIT does),
    so nothing is left half-written or open; a connection that is gone is Django's to replace.

    Inside a caller's transaction, or with ``then`` (``then(answer)`` run after the events are in,
    before the commit: an announcement of what the call changed), the same in ``transaction.atomic()``
    (a savepoint in a caller's transaction keeps a failed call from failing the caller's)."""
    if then is not None or connection.in_atomic_block or not connection.get_autocommit():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(call, arguments)
            answer = json.loads(cursor.fetchone()[0])
            if (events := events_of(answer)) is not None:
                cursor.execute(INSERT, [events])
            if then is not None:
                then(answer)
        return answer
    with connection.cursor() as cursor:
        try:
            cursor.execute(f"BEGIN; {call}", arguments)
            cursor.nextset()  # past BEGIN's empty result, to the call's
            answer = json.loads(cursor.fetchone()[0])  # Django's connections leave jsonb as text
            events = events_of(answer)
            cursor.execute("COMMIT") if events is None else cursor.execute(f"{INSERT}; COMMIT", [events])
        except BaseException:
            try:
                cursor.execute("ROLLBACK")
            except DatabaseError:
                pass
            raise
    return answer
