"""Keyset pagination for long lists (the console's queue and audit trail, the API's operations).

A list is shown by (a time column, id), newest first unless ``ascending``. A page is found from
the position of its neighbour's edge, carried in the "Older"/"Newer" links as a cursor
(``older=<time>_<id>``: the rows before that one in time; ``newer=``: the rows after it), not from
an offset: every page, however deep, is one index range read of ``size + 1`` rows (an index on
(field, id) serves both directions), and nothing counts the rows of the list (at millions of audit
events a COUNT alone took longer than the page). The words keep their meaning in an ascending list:
there "Newer" goes on down the list and "Older" comes back.
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
    newer: "Cursor | IdCursor | None"  # where the "Newer" link starts (None: nothing newer)
    older: "Cursor | IdCursor | None"  # where the "Older" link starts (None: nothing older)
    first: bool  # the list's first page (the newest, or the oldest when ascending), reached without a cursor
    span: tuple[datetime, datetime] | None = None  # the first and last time on the page
    ascending: bool = False  # oldest first

    @property
    def onward(self) -> "Cursor | IdCursor | None":
        """The cursor of the next page down the list."""
        return self.newer if self.ascending else self.older

    def __iter__(self):
        return iter(self.object_list)

    def __len__(self):
        return len(self.object_list)


def paginate(queryset: QuerySet, params, *, field: str, size: int, ascending: bool = False) -> Page:
    """The page of ``queryset`` (newest ``field`` first, then highest id; oldest and lowest first
    when ``ascending``) that ``params`` (the request's GET) points at with ``older`` or ``newer``;
    the list's first page without either. ``field="pk"``: by id alone (arrival order), the cursor
    an id."""
    if field == "pk":
        return _paginate_by_id(queryset, params, size=size, ascending=ascending)

    def cursor(row) -> Cursor:
        return Cursor(getattr(row, field), row.pk)

    def span(rows):
        return (getattr(rows[0], field), getattr(rows[-1], field)) if rows else None

    older, newer = Cursor.parse(params.get("older")), Cursor.parse(params.get("newer"))
    # Onward is down the list (older rows, or newer ones when ascending); back is towards its top.
    onward, back = (newer, older) if ascending else (older, newer)
    onward_from, back_from = (after, before) if ascending else (before, after)
    down, up = ([field, "pk"], [f"-{field}", "-pk"]) if ascending else ([f"-{field}", "-pk"], [field, "pk"])
    if back is not None and onward is None:
        # Read upwards from the cursor, then show the rows in the list's order like every page.
        rows = list(queryset.filter(back_from(field, back)).order_by(*up)[: size + 1])
        more = len(rows) > size
        rows = rows[:size][::-1]
        top, bottom = (cursor(rows[0]) if more else None), (cursor(rows[-1]) if rows else None)
        first = False
    else:
        if onward is not None:
            queryset = queryset.filter(onward_from(field, onward))
        rows = list(queryset.order_by(*down)[: size + 1])
        more = len(rows) > size
        rows = rows[:size]
        top, bottom = (cursor(rows[0]) if onward is not None and rows else None), (cursor(rows[-1]) if more else None)
        first = onward is None
    # ``top`` starts the page above this one, ``bottom`` the one below: newer and older, or the reverse.
    newer_cursor, older_cursor = (bottom, top) if ascending else (top, bottom)
    return Page(rows, newer=newer_cursor, older=older_cursor, first=first, span=span(rows), ascending=ascending)


def before(field: str, cursor: Cursor) -> Q:
    # (field, pk) < cursor, spelled so that the index on (field, id) is entered at the cursor: the
    # plain range on ``field`` is what the planner uses as the index condition.
    return Q(**{f"{field}__lte": cursor.at}) & (
        Q(**{f"{field}__lt": cursor.at}) | Q(**{field: cursor.at, "pk__lt": cursor.pk})
    )


def after(field: str, cursor: Cursor) -> Q:
    return Q(**{f"{field}__gte": cursor.at}) & (
        Q(**{f"{field}__gt": cursor.at}) | Q(**{field: cursor.at, "pk__gt": cursor.pk})
    )


@dataclass(frozen=True)
class IdCursor:
    """A position in a list ordered by id alone."""

    pk: int

    def __str__(self):
        return str(self.pk)

    @classmethod
    def parse(cls, text: str | None) -> "IdCursor | None":
        return cls(int(text)) if text and text.isdigit() and len(text) < 19 else None


def _paginate_by_id(queryset: QuerySet, params, *, size: int, ascending: bool) -> Page:
    older, newer = IdCursor.parse(params.get("older")), IdCursor.parse(params.get("newer"))
    onward, back = (newer, older) if ascending else (older, newer)
    down, up = ("pk", "-pk") if ascending else ("-pk", "pk")
    onward_from = (lambda c: Q(pk__gt=c.pk)) if ascending else (lambda c: Q(pk__lt=c.pk))
    back_from = (lambda c: Q(pk__lt=c.pk)) if ascending else (lambda c: Q(pk__gt=c.pk))
    if back is not None and onward is None:
        rows = list(queryset.filter(back_from(back)).order_by(up)[: size + 1])
        more = len(rows) > size
        rows = rows[:size][::-1]
        top, bottom, first = (IdCursor(rows[0].pk) if more else None), (IdCursor(rows[-1].pk) if rows else None), False
    else:
        if onward is not None:
            queryset = queryset.filter(onward_from(onward))
        rows = list(queryset.order_by(down)[: size + 1])
        more = len(rows) > size
        rows = rows[:size]
        top = IdCursor(rows[0].pk) if onward is not None and rows else None
        bottom, first = (IdCursor(rows[-1].pk) if more else None), onward is None
    newer_cursor, older_cursor = (bottom, top) if ascending else (top, bottom)
    return Page(rows, newer=newer_cursor, older=older_cursor, first=first, ascending=ascending)
