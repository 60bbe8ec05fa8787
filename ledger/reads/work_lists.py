"""What the queue lists, for every reader of it (the console's queue and its export, the API's
``GET /operations``): the operations of each state it offers (the states that need attention,
each of them, and the ones a pause holds), and the conditions its filters add (destination, age,
a key or request id). Each a plain condition on the operation's own columns, read along an index
the list is ordered by."""

from datetime import timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from ledger.actions import registry
from ledger.core.selectors import due_caller_operations, held_operations
from ledger.models import Control, Operation
from ledger.states import ATTENTION_STATES

# Not a state: the operations a pause holds (ledger.core.selectors.held_operations).
HELD = "held"
# Not a state either: the operations of caller-performed actions their callers may claim now, which
# nobody tells the caller of by itself (ledger.core.selectors.due_caller_operations).
DUE = "due"
# Every state that needs attention, together.
ATTENTION = "all"
# "Older than": how long ago an operation arrived.
AGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}


def queue_states(switches: list[Control]) -> dict[str, QuerySet]:
    """The operations of each state the queue offers: ``ATTENTION``, each attention state, and
    ``DUE`` (caller work that may be claimed now) and ``HELD`` (what ``switches``, the pulled pause
    switches, hold)."""
    return {
        ATTENTION: Operation.objects.filter(state__in=ATTENTION_STATES),
        **{state.value: Operation.objects.filter(state=state) for state in ATTENTION_STATES},
        DUE: due_caller_operations(switches=switches),
        HELD: held_operations(switches),
    }


def actions_by_destination() -> dict[str, list[str]]:
    """Every destination the actions call (an action's own name unless it names another), with its actions."""
    found: dict[str, list[str]] = {}
    for name in sorted(registry):
        found.setdefault(registry[name].destination_name(), []).append(name)
    return found


def destination_labels() -> dict[str, str]:
    """Every destination the external actions call, by name, with what people read for it
    (``ActionDefinition.destination_label``); internal actions call none."""
    return {action.destination_name(): action.destination_label() for action in registry.values() if action.external}


def for_destination(name: str) -> Q:
    return Q(action__in=actions_by_destination().get(name, []))


def older_than(age: str) -> Q:
    """Arrived longer ago than ``age`` (a key of ``AGES``)."""
    return Q(created_at__lt=timezone.now() - AGES[age])


def key_or_request_id(value: str, via: str = "") -> Q:
    """Operations whose key starts with ``value`` (a pasted key) or whose request id contains it,
    in any case, or whose destination record id it is: the searches PostgreSQL has indexes for
    (migrations 0007 and 0018). A request id an action declares sensitive is not searched: whoever
    sees it masked (a viewer, a machine's token) would learn it by searching its parts, a letter
    at a time; its key, where it is a keyed hash, is found by pasting it."""
    searchable = [name for name, action in registry.items() if "request_id" not in action.sensitive_fields]
    return (
        Q(**{f"{via}key__istartswith": value})
        | Q(**{f"{via}payload__request_id__icontains": value, f"{via}action__in": searchable})
        | Q(**{f"{via}external_id": value})
    )
