"""Due work, as a caller lists it (``GET /api/v1/claims/due``): the operations of caller-performed
actions that may be claimed now (``ledger.core.selectors.due_caller_operations``, the one definition
of "due"), oldest first, a page at a time along a keyset (when each became due, then its id)."""

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from ledger.core.selectors import due_caller_operations, due_since
from ledger.models import Operation, Workspace

MAX_LIMIT = 200
DEFAULT_LIMIT = 50


class BadCursor(ValueError):
    """A cursor this list never gave."""


@dataclass
class DuePage:
    operations: list[Operation]
    next_cursor: str | None  # None: this is the last page


def due_page(*, workspace: Workspace, action: str = "", limit: int = DEFAULT_LIMIT, cursor: str = "") -> DuePage:
    """Up to ``limit`` (1..``MAX_LIMIT``) due operations of ``workspace`` (of ``action`` when given),
    oldest first, after ``cursor`` (the previous page's ``next_cursor``). Each carries ``due_since``.
    Raises BadCursor for a cursor that is not one of ours; reads only."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be from 1 to {MAX_LIMIT}")
    operations = due_caller_operations().filter(workspace=workspace).annotate(due_since=due_since())
    if action:
        operations = operations.filter(action=action)
    if cursor:
        since, pk = read_cursor(cursor)
        operations = operations.filter(Q(due_since__gt=since) | Q(due_since=since, pk__gt=pk))
    rows = list(operations.order_by("due_since", "pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return DuePage(rows, cursor_after(rows[-1]) if more else None)


def cursor_after(operation) -> str:
    """The cursor of the page that follows ``operation`` (read with ``due_since``)."""
    text = f"{operation.due_since.isoformat()}|{operation.pk}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def read_cursor(cursor: str) -> tuple[datetime, int]:
    """The position a cursor names; BadCursor for anything else."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        since, pk = text.split("|")
        moment = datetime.fromisoformat(since)
        if moment.tzinfo is None or not (pk.isascii() and pk.isdigit() and len(pk) <= 18):
            raise ValueError("not a cursor")
        return moment, int(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadCursor("cursor is not one this list gave: start again without it") from None
