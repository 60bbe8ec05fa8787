"""Keyset pagination for the console's long lists (the queue, the audit trail).

A list is shown newest first by (a time column, id). A page is found from the position of its
neighbour's edge, carried in the "Older"/"Newer" links as a cursor (``older=<time>_<id>``), not
from an offset: every page, however deep, is one index range read of ``size + 1`` rows, and
nothing counts the rows of the list (at millions of audit events a COUNT alone took longer than
the page).
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Q, QuerySet

CURSOR_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True)
class Cursor:
    """A position in the list: the time and id of one row."""

    at: datetime
    pk: int

    def __str__(self):
        return f"{self.at.astimezone(UTC):{CURSOR_FORMAT}}_{self.pk}"

    @classmethod
    def parse(cls, text: str | None) -> "Cursor | None":
        """The cursor ``text`` names, or None for anything else (the list then starts at the newest)."""
        at, _, pk = (text or "").partition("_")
        try:
            return cls(datetime.strptime(at, CURSOR_FORMAT).replace(tzinfo=UTC), int(pk))
        except ValueError:
            return None


@dataclass
class Page:
    object_list: list
    newer: Cursor | None  # where the "Newer" link starts (None: this page holds the newest rows)
    older: Cursor | None  # where the "Older" link starts (None: nothing older)
    first: bool  # the newest page, reached without a cursor
    span: tuple[datetime, datetime] | None = None  # the newest and oldest time on the page

    def __iter__(self):
        return iter(self.object_list)

    def __len__(self):
        return len(self.object_list)


def paginate(queryset: QuerySet, params, *, field: str, size: int) -> Page:
    """The page of ``queryset`` (newest ``field`` first, then highest id) that ``params`` (the
    request's GET) points at with ``older`` or ``newer``; the newest page without either."""

    def cursor(row) -> Cursor:
        return Cursor(getattr(row, field), row.pk)

    def span(rows):
        return (getattr(rows[0], field), getattr(rows[-1], field)) if rows else None

    older, newer = Cursor.parse(params.get("older")), Cursor.parse(params.get("newer"))
    if newer is not None and older is None:
        # Read upwards from the cursor, then show the rows newest first like every page.
        rows = list(queryset.filter(_after(field, newer)).order_by(field, "pk")[:size + 1])
        more = len(rows) > size
        rows = rows[:size][::-1]
        return Page(rows, newer=cursor(rows[0]) if more else None,
                    older=cursor(rows[-1]) if rows else None, first=False, span=span(rows))
    if older is not None:
        queryset = queryset.filter(_before(field, older))
    rows = list(queryset.order_by(f"-{field}", "-pk")[:size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return Page(rows, newer=cursor(rows[0]) if older is not None and rows else None,
                older=cursor(rows[-1]) if more else None, first=older is None, span=span(rows))


def _before(field: str, cursor: Cursor) -> Q:
    # (field, pk) < cursor, spelled so that the index on (field, id) is entered at the cursor: the
    # plain range on ``field`` is what the planner uses as the index condition.
    return Q(**{f"{field}__lte": cursor.at}) & (
        Q(**{f"{field}__lt": cursor.at}) | Q(**{field: cursor.at, "pk__lt": cursor.pk}))


def _after(field: str, cursor: Cursor) -> Q:
    return Q(**{f"{field}__gte": cursor.at}) & (
        Q(**{f"{field}__gt": cursor.at}) | Q(**{field: cursor.at, "pk__gt": cursor.pk}))
