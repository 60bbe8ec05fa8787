"""CSV exports: operations and audit events as rows of text, for a spreadsheet.

Rows are produced one at a time from a queryset's ``iterator``, so an export of a million rows
holds one chunk of them in memory, never the list; the caller streams ``csv_chunks``. They are
read inside a transaction: a server-side cursor declared in autocommit is
``WITH HOLD``, which PostgreSQL fills with every row before the first is sent (the whole export
kept on the server, in temporary files); in a transaction it is read as the rows are written. Every value
of an operation's payload and result comes through ``privacy.exported``: masked unless the person
may see sensitive values in the operation's workspace, as the operation page shows it.

Cells are made safe to open in a spreadsheet: text that starts with ``= + - @`` (or a tab or a
carriage return) would be read as a formula there, so it is written with a leading ``'``
(OWASP's advice on CSV injection); numbers are written as they are. Times are ISO 8601 in UTC with
their offset, whatever zone the person reads the console in, and the export says so: in each time
column's name (``created_at (UTC)``) and in the file's name (``opsconsole.console.export``); the
times a message names (``ledger.timed``) are written the same way inside its text.
"""

import csv
import io
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import QuerySet

from ledger import timed
from ledger.actions import UnknownAction, get_action
from ledger.core import privacy

# How many rows a database round trip fetches (a server-side cursor), and how many
# written rows make one chunk of the response.
CHUNK_ROWS = 2000
FLUSH_ROWS = 500
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# The zone of an export's times, as its header and its file's name say it.
ZONE = "UTC"

OPERATION_COLUMNS = [
    "key",
    "workspace",
    "action",
    "state",
    "attempts",
    "error_category",
    "error_message",
    "external_id",
    f"created_at ({ZONE})",
    f"updated_at ({ZONE})",
]
# What operation_rows reads of each operation (``QuerySet.only``), the workspace's slug joined.
OPERATION_FIELDS = (
    "pk",
    "key",
    "workspace",
    "workspace__slug",
    "action",
    "state",
    "attempts",
    "last_error_category",
    "last_error_message",
    "last_error_times",
    "external_id",
    "created_at",
    "updated_at",
    "payload",
    "result",
)
# The payload and result values without a column of their own (a result, an action no longer defined).
MORE_COLUMN = "more"

AUDIT_COLUMNS = [
    f"created_at ({ZONE})",
    "workspace",
    "actor",
    "kind",
    "operation",
    "operation_id",
    "from_state",
    "to_state",
    "error_category",
    "message",
]
AUDIT_FIELDS = (
    "pk",
    "created_at",
    "workspace",
    "workspace__slug",
    "actor",
    "kind",
    "operation",
    "operation__key",
    "from_state",
    "to_state",
    "error_category",
    "message",
    "times",
)


def payload_fields(actions: Iterable[str]) -> list[str]:
    """The payload fields of ``actions``' schemas, each once, in the order the schemas give them."""
    fields: dict[str, None] = {}  # an ordered set
    for name in actions:
        try:
            fields |= dict.fromkeys(get_action(name).field_names())
        except UnknownAction:
            continue
    return list(fields)


def operation_rows(operations: QuerySet, *, user, actions: Iterable[str]) -> Iterator[list]:
    """The header, then one row per operation of ``operations`` (read with ``OPERATION_FIELDS`` and
    the workspace joined): its columns, a ``payload.<field>`` column for each field of ``actions``,
    and ``more`` (a JSON object of the other exported values, usually the result's)."""
    columns = [f"payload.{name}" for name in payload_fields(actions)]
    yield [*OPERATION_COLUMNS, *columns, MORE_COLUMN]
    for operation in _streamed(operations):
        values = privacy.exported(operation, user=user)
        more = {name: value for name, value in values.items() if name not in columns}
        yield [
            cell(value)
            for value in (
                operation.key,
                operation.workspace.slug,
                operation.action,
                operation.state,
                operation.attempts,
                operation.last_error_category,
                timed.as_iso(operation.last_error_message, operation.last_error_times),
                operation.external_id,
                operation.created_at,
                operation.updated_at,
                *(values.get(name) for name in columns),
                more or None,
            )
        ]


def audit_rows(events: QuerySet) -> Iterator[list]:
    """The header, then one row per audit event of ``events`` (read with ``AUDIT_FIELDS``, the
    operation and workspace joined). Audit events hold no payload values (``AuditEvent.message``)."""
    yield AUDIT_COLUMNS
    for event in _streamed(events):
        yield [
            cell(value)
            for value in (
                event.created_at,
                event.workspace.slug if event.workspace else "",
                event.actor,
                event.kind,
                # A purged operation (retention) is named by its id alone, as the audit page does.
                event.operation.key if event.operation else "",
                event.operation_id,
                event.from_state,
                event.to_state,
                event.error_category,
                timed.as_iso(event.message, event.times),
            )
        ]


def _streamed(queryset: QuerySet) -> Iterator:
    """The rows of ``queryset``, a chunk at a time, in a transaction (above). A client that goes
    away closes the generator, which ends the transaction.

    Through a server-side cursor even where Django's are off (DISABLE_SERVER_SIDE_CURSORS, behind a
    pooler in transaction mode: docs/operations.md): declared in the transaction, it lives no
    longer than the server session the pooler keeps for it, and without it the whole export would
    be read into the process before its first row is sent. ``_iterator`` is ``iterator`` without
    the setting's say."""
    with transaction.atomic(using=queryset.db):
        yield from queryset._iterator(use_chunked_fetch=True, chunk_size=CHUNK_ROWS)  # type: ignore[attr-defined]  # private, as said


def cell(value) -> str | int | float:
    """One value as a CSV cell."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return value
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_chunks(rows: Iterable[list]) -> Iterator[str]:
    """``rows`` written as CSV, in chunks of ``FLUSH_ROWS`` rows (a response streams them)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    rows = iter(rows)
    try:
        for number, row in enumerate(rows, 1):
            writer.writerow(row)
            if number % FLUSH_ROWS == 0:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
        if buffer.tell():
            yield buffer.getvalue()
    finally:
        # Closed early (the client went away): close the rows too, which ends their transaction.
        if hasattr(rows, "close"):
            rows.close()
