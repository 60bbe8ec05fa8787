"""Due work, as a caller lists it (``GET /api/v1/claims/due``): the operations of caller-performed
actions that may be claimed now (``ledger.core.selectors.due_caller_operations``, the one definition
of "due"), oldest first, a page at a time along a keyset (``ledger.reads.keyset``: when each became
due, then its id)."""

from dataclasses import dataclass

from ledger.core.selectors import due_caller_operations, due_since
from ledger.models import Operation, Workspace
from ledger.reads import keyset

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
    if cursor and keyset.Cursor.parse(cursor) is None:
        raise BadCursor("cursor is not one this list gave: start again without it")
    operations = due_caller_operations().filter(workspace=workspace).annotate(due_since=due_since())
    if action:
        operations = operations.filter(action=action)
    # Oldest first: the list goes on down towards the newer rows.
    page = keyset.paginate(
        operations, {"newer": cursor} if cursor else {}, field="due_since", size=limit, ascending=True
    )
    return DuePage(page.object_list, str(page.onward) if page.onward is not None else None)
