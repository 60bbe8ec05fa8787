"""Finding an operation by any id people hold for it (the console's "Find" box): its key, its
request id, the destination's record id, a sender's delivery or correlation id.

Reads only. Each field is one exact or prefix lookup through its own index
(operation_key_prefix_idx and operation_request_id_trgm_idx of migration 0007; the record,
delivery and correlation id indexes of migration 0018), narrowed to the person's workspaces and
bounded by ``LIMIT``: a lookup costs the same few queries at a million operations as at ten.
"""

from dataclasses import dataclass, field

from django.db.models import Q

from ledger.core import roles
from ledger.models import Attempt, Delivery, Operation

MAX_QUERY_LENGTH = 500
# Operations shown for one lookup; past it, the person is asked to type more of the id.
LIMIT = 25
# A Delivery's own number (the audit trail says "delivery 123 via api") fits a bigint.
MAX_DELIVERY_DIGITS = 18

# What each field is called on the page, in the order they are looked in.
FIELDS = {
    "key": "key (its start)",
    "request_id": "request id",
    "external_id": "destination record id",
    "attempt_external_id": "destination record id of an attempt",
    "sender_delivery_id": "delivery id",
    "delivery": "delivery number (#)",
    "correlation_id": "correlation id",
}

# What a delivery row shows (never its conflict's payload: a conflict is shown on its operation's page).
DELIVERY_COLUMNS = (
    "pk",
    "operation",
    "sender_delivery_id",
    "correlation_id",
    "outcome",
    "errors",
    "received_at",
    "source",
    "action",
    "key",
    "submitted_by",
    "workspace__slug",
)


class FindError(ValueError):
    """The text cannot be looked up; the message says why, for the person who typed it."""


@dataclass
class Match:
    operation: Operation
    fields: list[str]  # the labels of the fields that matched, in FIELDS order


@dataclass
class Found:
    query: str
    matches: list[Match]
    more: bool  # some field matched more than LIMIT rows: what matched may not all be listed
    refused: list[Delivery] = field(default_factory=list)  # arrivals with the id that became no operation
    searched: list[str] = field(default_factory=lambda: list(FIELDS.values()))


def clean_query(text: str | None) -> str:
    """The text to look up, trimmed; ``FindError`` for nothing, too much, or what no id can hold."""
    query = (text or "").strip()
    if not query:
        raise FindError("Type a key, request id, destination record id, delivery id or correlation id to find.")
    if len(query) > MAX_QUERY_LENGTH:
        raise FindError(f"That is {len(query)} characters long; no id is longer than {MAX_QUERY_LENGTH}.")
    if not query.isprintable():
        raise FindError("That text holds a line break or another control character; no id does.")
    return query


def find_operations(text: str | None, *, user) -> Found:
    """The operations of ``user``'s workspaces that ``text`` names, by any of ``FIELDS``: the start
    of their key, their request id (any case), the record id the destination gave them (or one of
    their attempts), the delivery id a sender gave one of their deliveries (or a delivery's own
    number), or the correlation id of one of their deliveries (an operation's correlation id is
    its first delivery's, and its deliveries live as long as it does: one index on deliveries
    finds both, where an index on operations would be paid for by every change of state).

    Twelve queries at most, each of ``LIMIT + 1`` rows or fewer; arrivals with the id that became
    no operation come back as ``refused``. ``FindError`` when ``text`` cannot be an id."""
    query = clean_query(text)
    operations = roles.visible(Operation.objects.all(), user)
    matched: dict[int, set[str]] = {}
    refused: dict[int, Delivery] = {}
    more = False

    def found(rows) -> list:
        nonlocal more
        # In no order: sorting would read every match (all of a workspace's, for its slug) to
        # keep LIMIT of them; the index gives the first LIMIT + 1 it meets.
        rows = list(rows.order_by()[: LIMIT + 1])
        more |= len(rows) > LIMIT
        return rows[:LIMIT]

    def mark(name: str, ids) -> None:
        for pk in ids:
            if pk is not None:
                matched.setdefault(pk, set()).add(name)

    pks = operations.values_list("pk", flat=True)
    if _may_begin_a_key(query, user):
        mark("key", found(pks.filter(key__istartswith=query)))
    mark("request_id", found(pks.filter(payload__request_id__iexact=query)))
    mark("external_id", found(pks.filter(external_id=query)))
    attempts = roles.visible(Attempt.objects.filter(external_id=query), user, via="operation__workspace")
    mark("attempt_external_id", found(attempts.values_list("operation_id", flat=True)))
    for name, lookup in _delivery_lookups(query).items():
        deliveries = roles.visible(Delivery.objects.filter(lookup), user)
        # Each operation once: one flow's correlation id may be on many deliveries of one operation.
        mark(name, found(deliveries.filter(operation__isnull=False).values_list("operation_id", flat=True).distinct()))
        rows = found(deliveries.filter(operation__isnull=True).select_related("workspace").only(*DELIVERY_COLUMNS))
        refused.update({row.pk: row for row in rows})

    shown = (
        operations.filter(pk__in=list(matched))
        .select_related("workspace")
        .only("pk", "key", "action", "state", "external_id", "updated_at", "workspace__slug")
    )
    for names in matched.values():
        if "external_id" in names:  # its attempt's record id is its own: said once
            names.discard("attempt_external_id")
    matches = [
        Match(op, [label for name, label in FIELDS.items() if name in matched[op.pk]])
        for op in sorted(shown, key=lambda op: (op.updated_at, op.pk), reverse=True)
    ]
    return Found(
        query=query,
        matches=matches,
        more=more,
        refused=sorted(refused.values(), key=lambda d: (d.received_at, d.pk), reverse=True),
    )


def _may_begin_a_key(query: str, user) -> bool:
    """Whether ``query`` can be the start of a key in one of ``user``'s workspaces: every key
    begins with its workspace's slug and a colon (``ledger.keys``, recipe 1).

    Asked first because the planner cannot tell that another workspace's slug matches none of
    this person's keys: it expects the many keys that begin so to be met soon, and reads the
    whole table through its workspace filter instead of the key's index."""
    ids = roles.workspace_ids(user)
    if ids is None:
        return True
    folded = query.upper()
    return any(
        folded.startswith(begins) or begins.startswith(folded)
        for begins in (f"{slug}:".upper() for slug in roles.workspaces(user).values_list("slug", flat=True))
    )


def _delivery_lookups(query: str) -> dict[str, Q]:
    lookups = {"sender_delivery_id": Q(sender_delivery_id=query)}
    if query.isdigit() and len(query) <= MAX_DELIVERY_DIGITS:
        lookups["delivery"] = Q(pk=int(query))
    lookups["correlation_id"] = Q(correlation_id=query)
    return lookups
