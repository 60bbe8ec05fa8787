"""The queue as a table people expect: what it lists for a request (filter and
sort), its sortable column headers, and its per-state counts (bounded, in one query). The queue
view (``views.queue``) and its CSV export (``export.queue_csv``) both start from ``queue_listing``."""

import hashlib
from dataclasses import dataclass

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import QuerySet
from django.http import QueryDict

from ledger import states
from ledger.actions import registry
from ledger.core import roles
from ledger.models import Control, Operation
from ledger.reads import replica, work_lists
from ledger.states import ATTENTION_STATES
from opsconsole.console.filters import DUE, HELD, QUEUE_SORTS, OperationsFilter, QueueFilter, Sort

TAB_LABELS = {"all": "All", DUE: "Due for their callers", HELD: "Held"}

# What the queue's rows show (and its sorts read), the rest of each operation left unread.
QUEUE_COLUMNS = (
    "pk",
    "key",
    "action",
    "state",
    "attempts",
    "last_error_category",
    "last_error_message",
    "last_error_times",
    "payload",  # the summary's fields (ledger.actions.summaries)
    "assigned_to__username",  # who took it (joined)
    "assigned_at",
    "created_at",
    "updated_at",
    "workspace_id",
)


@dataclass
class QueueListing:
    """What the queue shows for a request: its filter over the operations of the chosen state (the
    attention states together for "all", or the held operations), the sort, and the operations of
    each state the per-state counts are taken from, all of the person's workspaces."""

    filterset: QueueFilter
    sort: Sort
    showing_held: bool
    states: dict[str, QuerySet]  # "all", each attention state, "due", "held": its operations
    database: str  # where its rows are read: the replica for the page and its export (ledger.reads.replica)


def queue_listing(request, switches: list[Control]) -> QueueListing:
    """The queue's filter and sort from the request's GET; ``switches``: the active pause switches.
    Its rows are read from the replica when there is one: the page and the export only show them."""
    return listing_for(request.GET, request.user, switches, database=replica.for_lists())


def listing_for(params, user, switches: list[Control], *, database: str = replica.DEFAULT) -> QueueListing:
    """The queue's filter and sort from ``params`` (a query string's QueryDict), for ``user``, its
    rows read from ``database`` (the primary unless asked: a bulk action decides with it)."""
    states = {
        name: roles.visible(operations.using(database), user)
        for name, operations in work_lists.queue_states(switches).items()
    }
    # An unknown state is a form error, and lists them all.
    chosen = states.get(params.get("state", ""), states["all"])
    filterset = QueueFilter(params or None, queryset=chosen, user=user)
    filterset.filters["workspace"].queryset = roles.workspaces(user)
    return QueueListing(filterset, filterset.chosen_sort, params.get("state") == HELD, states, database)


# "Select all N matching": what a person saw as N is what is acted on. The page carries the
# digest of the ids it counted; the submission counts them again and refuses a different set.
def matching_digest(queryset: QuerySet, *, limit: int) -> tuple[int, str]:
    """How many operations ``queryset`` holds (up to ``limit + 1``) and the digest of their ids, in
    one query that reads the ids only (from an index where the filter has one)."""
    try:
        sql, params = queryset.order_by().values("pk")[: limit + 1].query.sql_with_params()
    except EmptyResultSet:  # .none(): a person who may decide none of them
        return 0, hashlib.sha256(b"").hexdigest()
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*), encode(sha256(convert_to(COALESCE(string_agg(pk::text, ',' ORDER BY pk), ''),"
            f" 'UTF8')), 'hex') FROM ({sql}) AS matching",
            params,
        )
        count, digest = cursor.fetchone()
    return count, digest


def matching_selection(request, queryset: QuerySet, count: int, *, shown: int, limit: int) -> dict | None:
    """What "select all N matching" sends (templates/console/_select_all_matching.html): the list's
    query (without its page), N and the digest of the ids counted. None where the page shows them
    all, or more match than one action takes (``limit``)."""
    if count <= shown or count > limit:
        return None
    query = request.GET.copy()
    for paging in ("older", "newer", "page"):
        query.pop(paging, None)
    return matching_payload(queryset, query, limit=limit)


def matching_payload(queryset: QuerySet, query: QueryDict, *, limit: int) -> dict | None:
    """What an "all N matching" action sends back: the list's ``query``, N (counted now, up to
    ``limit + 1``) and the digest of the ids counted, which the action checks again before it acts.
    None when nothing matches (a person who may act on none of them)."""
    return _payload(*matching_digest(queryset, limit=limit), query)


def ids_payload(ids: list[int], query: QueryDict) -> dict | None:
    """``matching_payload`` of ids already read (in order, at most the action's limit): the same
    count and digest, None when there is none."""
    return _payload(len(ids), ids_digest(ids), query)


def _payload(count: int, digest: str, query: QueryDict) -> dict | None:
    return {"count": count, "digest": digest, "query": query.urlencode()} if count else None


def matching_ids(queryset: QuerySet, *, limit: int) -> tuple[list[int], str]:
    """The ids ``queryset`` holds (up to ``limit + 1``), in order, and their digest as
    ``matching_digest`` computes it."""
    ids = sorted(queryset.order_by().values_list("pk", flat=True)[: limit + 1])
    return ids, ids_digest(ids)


def ids_digest(ids: list[int]) -> str:
    """The digest of ``ids`` (in order) as ``matching_digest`` computes it in the database."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def all_operations_filter(request) -> OperationsFilter:
    """The list of all operations' filter for a request, its rows read from the replica when there
    is one (the page only shows them)."""
    return operations_filter(request.GET, request.user, database=replica.for_lists())


def operations_filter(params, user, *, database: str = replica.DEFAULT) -> OperationsFilter:
    """The filter of the list of all operations (any state) from ``params``, for ``user``, its rows
    read from ``database``."""
    operations = roles.visible(Operation.objects.using(database), user)
    filterset = OperationsFilter(params or None, queryset=operations, user=user)
    filterset.filters["workspace"].queryset = roles.workspaces(user)
    return filterset


def list_query(params, name: str) -> str:
    """The query an operation's link carries from list ``name`` (``queue``, ``all``) with
    ``params``: its filters and sort, not its page (opsconsole.console.neighbours reads it back)."""
    query = params.copy()
    for paging in ("older", "newer", "page", "list"):
        query.pop(paging, None)
    query["list"] = name
    return query.urlencode()


def summarise(operations) -> None:
    """Give each operation its ``summary``: its action's line over its payload, never a sensitive
    value (``ledger.actions.summaries``); nothing for an action no longer defined."""
    for operation in operations:
        action = registry.get(operation.action)
        operation.summary = action.summarise(operation.payload, key=operation.key) if action else ""


def state_counts(listing: QueueListing, *, cap: int) -> dict[str, int]:
    """For each state the queue's filter offers, how many operations it would list with the other
    filters as they are, each counted up to ``cap + 1``: one query. "all" is the sum of the
    attention states' (past the cap when any of them is): not counted again."""
    counts = bounded_counts(
        {name: listing.filterset.narrowed(operations) for name, operations in listing.states.items() if name != "all"},
        cap=cap,
    )
    return {"all": sum(counts[state] for state in ATTENTION_STATES)} | counts


def bounded_counts(querysets: dict[str, QuerySet], *, cap: int) -> dict[str, int]:
    """How many rows each queryset holds, up to ``cap + 1`` (more tells a person nothing, and
    counting it would read every row), in one query: one scalar subquery per queryset, each
    ``COUNT(*)`` over its first ``cap + 1`` ids. An empty queryset (``none()``) counts 0 unread."""
    counts, parts, params = {}, [], []
    for number, (name, queryset) in enumerate(querysets.items()):
        try:
            sql, more = queryset.order_by().values("pk")[: cap + 1].query.sql_with_params()
        except EmptyResultSet:
            counts[name] = 0
            continue
        parts.append((name, f"(SELECT COUNT(*) FROM ({sql}) AS bounded_{number})"))
        params.extend(more)
    if parts:
        database = next(iter(querysets.values())).db
        with connections[database].cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(part for _, part in parts), params)
            counts |= dict(zip([name for name, _ in parts], cursor.fetchone(), strict=True))
    return {name: counts[name] for name in querysets}


def state_tabs(counts: dict[str, int], *, current: str, cap: int) -> list[dict]:
    """The queue's state links, in the filter's order, with their bounded counts."""
    return [
        {
            "state": state,
            "label": TAB_LABELS.get(state) or states.label(state),
            "count": min(counts[state], cap),
            "capped": counts[state] > cap,
            "current": state == current,
        }
        for state in ["all", *ATTENTION_STATES, DUE, HELD]
    ]


def sort_headers(sort: Sort) -> dict[str, dict]:
    """The sortable column headers: where each links (the other direction when it is the sort,
    else newest first) and its ``aria-sort`` (None: the list is not sorted by it)."""
    headers = {}
    for column, field in [("updated", "updated_at"), ("arrived", "created_at")]:
        by_direction = {each.ascending: each.name for each in QUEUE_SORTS.values() if each.field == field}
        current = sort.field == field
        headers[column] = {
            "sort": by_direction[not sort.ascending] if current else by_direction[False],
            "aria_sort": ("ascending" if sort.ascending else "descending") if current else None,
        }
    return headers
