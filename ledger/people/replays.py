"""Replaying an operation that needs review: it runs again under its own key (so the destination
receives the same idempotency key), after asking the destination first where a try may have reached
it, and after the person confirms a configuration changed since it last ran.
"""

from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from ledger.core import nudges, roles
from ledger.core.configuration import Change, changes_since_last_run
from ledger.core.transitions import record_audit_event, transition_operation
from ledger.engine.lookups import ask_destination, may_have_acted
from ledger.intake.ordering import GAP
from ledger.models import Contribution, Delivery, Operation
from ledger.outcomes import CannotTell, Found
from ledger.people import may
from ledger.people.review import (
    ReviewError,
    action_of,
    refuse_sensitive_reason,
    require,
    require_review,
    succeed_found,
)
from ledger.states import State


class DuplicateRisk(ReviewError):
    """A replay was refused: the destination cannot tell whether the operation already acted there."""


class ConfigChanged(ReviewError):
    """A replay was not confirmed: the action's configuration changed since the operation last ran."""

    def __init__(self, message: str, changes: list[Change]):
        super().__init__(message)
        self.changes = changes


@dataclass(frozen=True)
class Replay:
    """What a replay did. ``verdict``: ``replayed`` (it will run again), ``found`` (the destination
    already had the record: the operation is succeeded and nothing is sent), or ``forced`` (it
    will run again although the destination could not tell, as the person accepted)."""

    operation: Operation
    verdict: str
    lookup: str = ""  # what the destination said, when it was asked


def replay_operation(
    operation: Operation, *, user, reason: str, accept_duplicate_risk: bool = False, accept_config_change: bool = False
) -> Replay:
    """Run an operation that needs review again, under the same key (so the same idempotency key
    reaches the destination): ``needs_review`` -> ``pending`` (``pending_approval`` when the action
    is consequential), with a fresh attempt budget and deadline.

    If a try may already have reached the destination, the destination is asked first (outside
    any transaction): found -> ``succeeded`` with its record id, nothing is sent; absent -> the
    replay goes ahead; cannot tell -> ``DuplicateRisk``, unless ``accept_duplicate_risk`` (audited
    as ``replay_forced``, with the person and the reason). The replay is recorded as a delivery
    (source ``replay``) and the person as a contributor; a definition change since the
    operation was reserved is called out. Workers are nudged on commit.

    When the action's configuration changed since the operation last ran (``ledger.core.configuration``:
    destination, timeouts, definition, policy ...), the replay needs ``accept_config_change``:
    without it, ``ConfigChanged`` lists what changed, field by field, and nothing is done. The
    changes go into the replay's audit event.
    """
    require_review(user, operation)
    actor = user.get_username()
    require(may.replay_refusal(operation))
    if accept_duplicate_risk and not reason.strip():
        raise ReviewError("Say why the replay may risk a duplicate: the reason is kept in the audit trail.")
    refuse_sensitive_reason(reason, operation)
    action = action_of(operation)
    changed = changes_since_last_run(operation, action)
    if changed and not accept_config_change:
        raise ConfigChanged(
            f"The configuration of {operation.action} changed since {operation.key} last ran: "
            f"{'; '.join(str(change) for change in changed)}. Confirm the replay under the new configuration.",
            changed,
        )
    risk = ""
    lookup = ""
    if may_have_acted(operation, action):
        answer = ask_destination(operation, action)
        if isinstance(answer, Found):
            succeed_found(operation, answer, actor=actor, reason=reason, asked_by="replay")
            return Replay(operation, "found", lookup=f"the destination has record {answer.external_id}")
        if isinstance(answer, CannotTell):
            risk = answer.reason
            if not accept_duplicate_risk:
                record_audit_event(
                    actor=actor,
                    kind="replay_refused",
                    operation=operation,
                    message=f"the destination cannot tell whether it acted: {risk}",
                )
                raise DuplicateRisk(
                    f"Replay refused: the destination cannot tell whether {operation.key} already acted there "
                    f"({risk}). Sending it again could make a second {operation.action}. Check the destination "
                    "by hand: if the record is there, resolve the operation with its id; if it is not, replay "
                    "again accepting the duplicate risk."
                )
        lookup = "the destination has no record" if not risk else f"the destination cannot tell: {risk}"
    _replay(
        operation, action, actor=actor, user=user, reason=reason, forced_because=risk, lookup=lookup, changed=changed
    )
    return Replay(operation, "forced" if risk else "replayed", lookup=lookup)


def _replay(operation, action, *, actor, user, reason, forced_because, lookup, changed=()) -> None:
    message = f"replay: {reason}" if reason else "replay"
    if forced_because:
        message = f"replay accepting the duplicate risk: {reason}"
    if operation.definition_version != action.version:
        message += f" (definition changed {operation.definition_version} -> {action.version})"
    message += f" after {operation.attempts} attempt(s)"
    if lookup:
        message += f"; {lookup}"
    if changed:
        message += f"; under a changed configuration: {', '.join(change.field for change in changed)}"
    ordering: dict[str, Any] = {}
    if operation.last_error_category == GAP:
        # The person decided it runs although an earlier version never came (in_order).
        ordering["ordered"] = ""
        message += f"; runs without waiting for version {operation.version - 1}"
    now = timezone.now()
    with transaction.atomic():
        # Lock order (docs/architecture.md): the row, then the chain (transition_operation); after it only new rows.
        replayed = transition_operation(
            operation,
            to_state=State.PENDING_APPROVAL if action.consequential else State.PENDING,
            actor=actor,
            kind="replay_forced" if forced_because else "replayed",
            message=message,
            attempts=0,
            next_attempt_at=None,
            deadline=action.first_deadline(now),
            definition_version=action.version,
            last_error_category="",
            last_error_message="",
            **ordering,
        )
        if not replayed:
            raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")
        Delivery.objects.create(
            workspace_id=operation.workspace_id,
            operation=operation,
            source=Delivery.Source.REPLAY,
            submitted_by=actor,
            person=roles.person_of(user),
            action=operation.action,
            key=operation.key,
            correlation_id=operation.correlation_id,
            outcome=Delivery.Outcome.ACCEPTED,
        )
        if roles.person_of(user) is not None:  # a machine's replay is nobody's work (four eyes)
            Contribution.objects.create(operation=operation, user=user, kind=Contribution.Kind.REPLAYED)
        transaction.on_commit(partial(nudges.enqueue_processing, operation.pk))
