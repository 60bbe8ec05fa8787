"""Asking a destination what became of an operation whose try may have reached it.

Reconciliation asks about ``unknown`` operations; a replay asks before it sends anything again
(docs/design.md rule 9). The lookup is a network call: callers run it outside any transaction.
"""

from dataclasses import replace
from datetime import datetime

from django.utils import timezone

from ledger.actions import ActionDefinition
from ledger.core import policies, privacy
from ledger.engine import limits
from ledger.models import Attempt, Operation
from ledger.outcomes import Absent, CannotTell, Found

# A try with one of these outcomes was refused before the destination acted; any other try
# (ok, ambiguous, stale, abandoned, or never finished) may have left a record there.
_REFUSED = (Attempt.Outcome.TRANSIENT, Attempt.Outcome.PERMANENT)


def may_have_acted(operation: Operation, action: ActionDefinition) -> bool:
    """Whether any try of ``operation`` may have reached its (external) destination."""
    return action.external and operation.attempt_rows.exclude(outcome__in=_REFUSED).exists()


def settles_at(operation: Operation, action: ActionDefinition) -> datetime | None:
    """When the last try's request can no longer land at the destination (``settle_after`` past
    its start); before that, a lookup that finds nothing proves nothing."""
    last_try = operation.attempt_rows.order_by("-fencing_token").values_list("started_at", flat=True).first()
    return last_try + action.settle_after if last_try else None


def ask_destination(
    operation: Operation, action: ActionDefinition, *, now: datetime | None = None
) -> Found | Absent | CannotTell:
    """The destination's answer about ``operation``; an "absent" while a request may still be
    landing is not believed (it becomes a ``CannotTell`` that says when to ask again)."""
    now = now or timezone.now()
    answer = _asked(operation, action)
    if isinstance(answer, CannotTell):
        # Its reason may quote the destination, and is stored (the last error, the audit trail).
        answer = replace(answer, reason=privacy.scrubbed_text(answer.reason, operation, action))
    settled = settles_at(operation, action)
    if isinstance(answer, Absent) and settled and now < settled:
        # No clock time in the words (they are stored): the try's start is on its attempt row.
        waited = policies.format_duration(action.settle_after)
        return CannotTell(f"no record yet, but the last request may still land (within {waited} of the try's start)")
    return answer


def _asked(operation: Operation, action: ActionDefinition) -> Found | Absent | CannotTell:
    """The lookup, under the destination's limits (``ledger.engine.limits``): paced, a slot held,
    not made while its calls are paused. An answer closes the breaker; a lookup that could not
    tell is no verdict on the destination (it may be a 404 of a record we never made)."""
    if not action.limits().any:
        return action.lookup(operation)
    gate = limits.Gate(action)
    if gate.admission():
        # Until when: the breaker_opened audit event and the destination's health row say.
        return CannotTell(f"not asked: calls to {gate.destination} are paused (circuit breaker)")
    with gate.one_call():
        answer = action.lookup(operation)
    if not isinstance(answer, CannotTell):
        gate.note(failed=False)
    return answer
