"""What a person does with an operation: replay it under its own key, resolve it with evidence from
the destination, or cancel it; and with a conflict: dismiss it, or apply its payload while the
operation has not run.

Console views and commands call these with the person acting (an operator or admin of the
operation's workspace, ``ledger.core.roles``); like every write they go through
``transition_operation``, so each is a guarded state change with its audit event. Whoever replays
an operation or applies a conflict to it is recorded as one of its contributors, who may not
approve it (``ledger.people.approvals``).
"""

from dataclasses import dataclass
from functools import partial

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ledger.actions import UnknownAction, get_action, registry
from ledger.core import nudges, roles, sensitive_notes
from ledger.core.configuration import Change, changes_since_last_run
from ledger.core.transitions import record_audit_event, transition_operation
from ledger.engine.lookups import ask_destination, may_have_acted
from ledger.intake.ordering import GAP
from ledger.intake.reservation import CONFLICT_HOLD
from ledger.models import Conflict, Contribution, Delivery, Operation
from ledger.outcomes import CannotTell, Found
from ledger.people import holds
from ledger.states import TRANSITIONS, State

EXTERNAL_ID_MAX = 200


class ReviewError(Exception):
    """The action is not possible for this operation now; the message says why."""


class SensitiveReason(sensitive_notes.SensitiveNote, ReviewError):
    """The reason quotes a sensitive value of what it concerns (``sensitive_notes.refuse_sensitive_note``)."""


def refuse_sensitive_reason(reason: str, *concerns) -> None:
    """Refuse (``SensitiveReason``, before anything is written) a reason quoting a sensitive value."""
    sensitive_notes.refuse_sensitive_note(reason, concerns, error=SensitiveReason)


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
    _require_review(user, operation)
    actor = user.get_username()
    if operation.state != State.NEEDS_REVIEW:
        raise ReviewError(f"Only an operation that needs review can be replayed; {operation.key} is {operation.state}.")
    if holds.is_held(operation):
        raise ReviewError(
            f"{operation.key} is held by a conflicting delivery and has not run: apply or dismiss the conflict "
            "to let it run (a replay would run it without deciding which payload is meant)."
        )
    if accept_duplicate_risk and not reason.strip():
        raise ReviewError("Say why the replay may risk a duplicate: the reason is kept in the audit trail.")
    refuse_sensitive_reason(reason, operation)
    action = _action_of(operation)
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
            _succeed_found(operation, answer, actor=actor, reason=reason, asked_by="replay")
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


def _succeed_found(operation, answer: Found, *, actor, reason, asked_by: str) -> None:
    """A replay or a cancel asked the destination first, and it has the record: succeeded."""
    done = "nothing was sent" if asked_by == "replay" else "nothing was cancelled"
    found = transition_operation(
        operation,
        to_state=State.SUCCEEDED,
        actor=actor,
        kind="reconciled_on_replay" if asked_by == "replay" else "reconciled_on_cancel",
        message=f"{asked_by} asked the destination first: it has record {answer.external_id}; {done}"
        + (f" ({reason})" if reason else ""),
        external_id=answer.external_id,
        result=answer.result,
        next_attempt_at=None,
        last_error_category="",
        last_error_message="",
    )
    if not found:
        raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")


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
    ordering = {}
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
            person=user,
            action=operation.action,
            key=operation.key,
            correlation_id=operation.correlation_id,
            outcome=Delivery.Outcome.ACCEPTED,
        )
        Contribution.objects.create(operation=operation, user=user, kind=Contribution.Kind.REPLAYED)
        transaction.on_commit(partial(nudges.enqueue_processing, operation.pk))


def resolve_operation(
    operation: Operation, *, user, external_id: str, reason: str, seen_at_destination: bool = False
) -> Operation:
    """A person who checked the destination by hand records what they found there: an ``unknown``
    or ``needs_review`` operation becomes ``succeeded`` with the destination's record id, audited
    with the person and how they checked. Only where a try may have reached the destination
    (``may_mark_succeeded``): after definite refusals alone, no record of ours can be there, unless
    the reconciliation audit saw one carrying our key (``seen_at_destination``)."""
    _require_review(user, operation)
    external_id = external_id.strip()
    if not external_id:
        raise ReviewError("Give the destination's record id you found.")
    if len(external_id) > EXTERNAL_ID_MAX or not external_id.isprintable():
        raise ReviewError(f"The record id must be printable text of at most {EXTERNAL_ID_MAX} characters.")
    if not reason.strip():
        raise ReviewError("Say how you checked the destination: the reason is kept in the audit trail.")
    refuse_sensitive_reason(reason, operation)
    if operation.state not in (State.UNKNOWN, State.NEEDS_REVIEW):
        raise ReviewError(
            f"Only an unknown operation or one that needs review can be resolved; {operation.key} is {operation.state}."
        )
    if holds.is_held(operation):
        raise ReviewError(
            f"{operation.key} is held by a conflicting delivery and never ran: the destination has no record of it. "
            "Apply or dismiss the conflict to let it run, or cancel it."
        )
    action = _action_of(operation)
    if not action.external:
        raise ReviewError(
            f"{operation.action} has no external destination to find a record at; "
            "replay or cancel the operation instead."
        )
    if not seen_at_destination and not may_mark_succeeded(operation, action):
        raise ReviewError(
            f"Every try of {operation.key} was refused before it acted, so the destination holds no record of it; "
            "replay or cancel the operation instead."
        )
    actor = user.get_username()
    resolved = transition_operation(
        operation,
        to_state=State.SUCCEEDED,
        actor=actor,
        kind="resolved",
        message=f"resolved by hand: the destination has record {external_id}: {reason}",
        external_id=external_id,
        result={"external_id": external_id, "resolved_by": actor},
        next_attempt_at=None,
        last_error_category="",
        last_error_message="",
    )
    if not resolved:
        raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")
    return operation


def may_mark_succeeded(operation: Operation, action) -> bool:
    """Whether a person may record that the destination has the operation's record: it is unknown,
    or a try of it may have reached the destination (not only definite refusals)."""
    return bool(action and action.external) and (operation.state == State.UNKNOWN or may_have_acted(operation, action))


@dataclass(frozen=True)
class Cancel:
    """What a cancel did. ``verdict``: ``cancelled``, or ``found`` (a try may have reached the
    destination, which was asked first and has the record: the operation is succeeded, nothing
    was cancelled)."""

    operation: Operation
    verdict: str
    lookup: str = ""  # what the destination said, when it was asked


def cancel_operation(operation: Operation, *, user, reason: str) -> Cancel:
    """Give up on an operation that has not run to an end (pending, retrying or needing review).

    Where a try may have reached the destination, it is asked first, as a replay asks (outside any
    transaction): found -> ``succeeded`` with its record id and nothing is cancelled, since the
    effect happened; absent or cannot tell -> cancelled, with what it said in the audit message."""
    _require_review(user, operation)
    if State.CANCELLED not in TRANSITIONS[State(operation.state)]:
        allowed = ", ".join(sorted(s for s, targets in TRANSITIONS.items() if State.CANCELLED in targets))
        raise ReviewError(f"{operation.key} is {operation.state}; only {allowed} operations can be cancelled.")
    refuse_sensitive_reason(reason, operation)
    actor = user.get_username()
    action = registry.get(operation.action)  # an action no longer defined: cancelled unasked
    lookup = ""
    if action is not None and may_have_acted(operation, action):
        answer = ask_destination(operation, action)
        if isinstance(answer, Found):
            _succeed_found(operation, answer, actor=actor, reason=reason, asked_by="cancel")
            return Cancel(operation, "found", lookup=f"the destination has record {answer.external_id}")
        lookup = (
            f"the destination cannot tell whether it acted: {answer.reason}"
            if isinstance(answer, CannotTell)
            else "the destination has no record"
        )
    message = f"cancel: {reason}" if reason else "cancel"
    cancelled = transition_operation(
        operation,
        to_state=State.CANCELLED,
        actor=actor,
        kind="cancelled",
        message=message + (f"; {lookup}" if lookup else ""),
        next_attempt_at=None,
    )
    if not cancelled:
        raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")
    return Cancel(operation, "cancelled", lookup=lookup)


def dismiss_conflict(conflict: Conflict, *, user, reason: str) -> Conflict:
    """Keep the recorded payload: the incoming one was a mistake (or is stale) and stays unapplied."""
    _require_review(user, conflict.operation)
    refuse_sensitive_reason(reason, conflict.operation, conflict)
    actor = user.get_username()
    with transaction.atomic():
        _decide(conflict, Conflict.Status.DISMISSED, actor=actor)
        holds.lock_held([conflict.operation_id])  # lock order: the conflict, the operation, the chain
        record_audit_event(
            actor=actor,
            kind="conflict_dismissed",
            operation=conflict.operation,
            message=conflict_message(conflict, reason),
        )
        holds.release_decided({conflict.operation_id: decision_message(conflict, "dismissed", reason)}, actor=actor)
    return conflict


def states_taking_a_payload(action) -> list[State]:
    """Where an operation that has not run yet (no attempt) may still have its payload replaced. A
    consequential operation's approval covers the payload it was given for: once approved, the
    payload stays as approved (the conflict can be dismissed, or a new version submitted)."""
    return [State.PENDING_APPROVAL] if action.consequential else [State.PENDING, State.PENDING_APPROVAL]


def apply_conflict(conflict: Conflict, *, user, reason: str) -> Conflict:
    """Replace the operation's payload with the conflict's, allowed only while the operation has
    not run (pending or awaiting approval, no attempt yet; for a consequential action only while
    awaiting approval), or while a conflict holds it in one of those states (``ledger.people.holds``,
    which then releases it to run with this payload): what already happened, or was approved, is
    never rewritten. The person who applies it, and the person who sent the conflicting payload (if a
    person did), become contributors of the operation.

    Locks: the conflict, then the operation row, by a guarded UPDATE that also requires the payload
    the conflict was measured against, so a worker's claim or another decision in between makes this
    refuse (and the conflict stays open: the transaction is rolled back).
    """
    _require_review(user, conflict.operation)
    refuse_sensitive_reason(reason, conflict.operation, conflict)
    actor = user.get_username()
    operation = conflict.operation
    with transaction.atomic():
        # Lock order (docs/architecture.md): the conflict, the operation, the audit chain.
        _decide(conflict, Conflict.Status.APPLIED, actor=actor)
        applied = (
            Operation.objects.filter(pk=operation.pk, attempts=0, fingerprint=operation.fingerprint)
            .filter(_taking_a_payload(operation))
            .update(
                payload=conflict.incoming_payload, fingerprint=conflict.incoming_fingerprint, updated_at=timezone.now()
            )
        )
        if not applied:
            raise ReviewError(
                f"{operation.key} has already run or changed ({operation.state}, {operation.attempts} attempt(s)); "
                "a conflict can only be applied before the operation runs. Dismiss it, or submit a new version."
            )
        contributions = [Contribution(operation=operation, user=user, kind=Contribution.Kind.CHANGED)]
        if conflict.delivery.person_id is not None:
            contributions.append(
                Contribution(operation=operation, user_id=conflict.delivery.person_id, kind=Contribution.Kind.SUBMITTED)
            )
        Contribution.objects.bulk_create(contributions)
        record_audit_event(
            actor=actor, kind="conflict_applied", operation=operation, message=conflict_message(conflict, reason)
        )
        holds.release_decided({operation.pk: decision_message(conflict, "applied", reason)}, actor=actor)
    operation.payload, operation.fingerprint = conflict.incoming_payload, conflict.incoming_fingerprint
    return conflict


def _taking_a_payload(operation: Operation) -> Q:
    """The rows ``apply_conflict`` may change: in a state taking a payload, or held by a conflict from one."""
    taking = states_taking_a_payload(_action_of(operation))
    where = Q(state__in=taking)
    if holds.is_held(operation) and holds.held_from([operation.pk]).get(operation.pk) in taking:
        where |= Q(state=State.NEEDS_REVIEW, last_error_category=CONFLICT_HOLD)
    return where


def may_apply(operation: Operation, action, origins: dict[int, State] | None = None) -> bool:
    """Whether a conflict of ``operation`` (as loaded) can be applied now (``apply_conflict`` decides;
    pages use this to offer it). ``origins``: ``holds.held_from`` of a page's held operations, read
    once for all of them."""
    if operation.attempts != 0:
        return False
    taking = states_taking_a_payload(action)
    if holds.is_held(operation):
        origins = holds.held_from([operation.pk]) if origins is None else origins
        return origins.get(operation.pk) in taking
    return operation.state in taking


def decision_message(conflict: Conflict, decided: str, reason: str) -> str:
    """What a release says ran it: ``conflict 7 applied: <reason>``, and which payload stands."""
    stands = "the incoming payload" if decided == "applied" else "the recorded payload"
    return f"conflict {conflict.pk} {decided}" + (f": {reason}" if reason else "") + f"; {stands} stands"


def _decide(conflict: Conflict, status: str, *, actor: str) -> None:
    now = timezone.now()
    decided = Conflict.objects.filter(pk=conflict.pk, status=Conflict.Status.OPEN).update(
        status=status, decided_by=actor, decided_at=now
    )
    if not decided:
        conflict.refresh_from_db(fields=["status"])
        raise ReviewError(f"Conflict {conflict.pk} is already {conflict.status}.")
    conflict.status, conflict.decided_by, conflict.decided_at = status, actor, now


def conflict_message(conflict: Conflict, reason: str) -> str:
    """The audit message of a decision on a conflict (``ledger.people.conflict_decisions`` writes the same)."""
    fields = ", ".join(d["field"] for d in conflict.differences)
    return f"conflict {conflict.pk} ({fields}): {reason}" if reason else f"conflict {conflict.pk} ({fields})"


def _require_review(user, operation: Operation) -> None:
    """The person needs a role that may review in the operation's workspace (operator or admin)."""
    if not roles.can(user, roles.REVIEW, operation.workspace_id):
        raise ReviewError(roles.refusal(user, roles.REVIEW, operation.workspace))


def _action_of(operation: Operation):
    try:
        return get_action(operation.action)
    except UnknownAction:
        raise ReviewError(f"Action {operation.action!r} is not registered; {operation.key} cannot run.") from None
