"""Asking a destination what became of an operation whose try may have reached it.

Reconciliation asks about ``unknown`` operations; a replay asks before it sends anything again
(docs/design.md rule 9). The lookup is a network call: callers run it outside any transaction.
"""

from dataclasses import replace
from datetime import datetime

from django.utils import timezone

from ledger.actions import ActionDefinition
from ledger.core import privacy
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
        return CannotTell(f"no record yet, but the last request may still land until {settled:%Y-%m-%d %H:%M:%S} UTC")
    return answer


def _asked(operation: Operation, action: ActionDefinition) -> Found | Absent | CannotTell:
    """The lookup, under the destination's limits (``ledger.engine.limits``): paced, a slot held,
    not made while its calls are paused. An answer closes the breaker; a lookup that could not
    tell is no verdict on the destination (it may be a 404 of a record we never made)."""
    if not action.limits().any:
        return action.lookup(operation)
    gate = limits.Gate(action)
    if paused_until := gate.admission():
        return CannotTell(f"not asked: {gate.paused_message(paused_until)}")
    with gate.one_call():
        answer = action.lookup(operation)
    if not isinstance(answer, CannotTell):
        gate.note(failed=False)
    return answer
