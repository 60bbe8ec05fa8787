"""What a person does with a mismatch the reconciliation audit found: acknowledge it, adopt the
destination's record, or replay the operation whose record is missing.

Each needs the review capability in the mismatch's workspace (``ledger.core.roles``), decides the
mismatch once (a guarded UPDATE from ``open``) and is audited with the person. Adopting and
replaying act on the operation through the review services (``ledger.people.resolutions``,
``ledger.people.replays``), so the state machine, its guards and the replay's safety (the
destination is asked before anything is sent) are the same as on the operation's page.
"""

from django.db import transaction
from django.utils import timezone

from ledger.core import roles
from ledger.core.transitions import record_audit_event, transition_operation
from ledger.models import Operation
from ledger.people import replays, resolutions, review
from ledger.people.review import ReviewError
from ledger.states import State
from reconciliation.models import Mismatch


def acknowledge_mismatch(mismatch: Mismatch, *, user, reason: str) -> Mismatch:
    """Close the mismatch with the person's reason (known and accepted, or fixed elsewhere);
    nothing else changes."""
    _require_review(user, mismatch)
    _require_reason(reason, mismatch)
    with transaction.atomic():
        _decide(mismatch, Mismatch.Status.ACKNOWLEDGED, user=user, note=reason)
        _audit(mismatch, "mismatch_acknowledged", user=user, reason=reason)
    return mismatch


def adopt_mismatch(mismatch: Mismatch, *, user, reason: str) -> Mismatch:
    """The destination's record is the operation's: an ``unknown_to_ledger`` record whose
    operation exists but did not succeed (unknown or needs review) is resolved with the record's
    id (``resolutions.resolve_operation``), in the same transaction as the decision."""
    _require_review(user, mismatch)
    _require_reason(reason, mismatch)
    if mismatch.kind != Mismatch.Kind.UNKNOWN_TO_LEDGER:
        raise ReviewError(f"Only a record unknown to the ledger can be adopted; this mismatch is {mismatch.kind}.")
    operation = _operation(mismatch)
    if operation is None:
        raise ReviewError(
            f"No operation has the key {mismatch.reference}: there is nothing to adopt record "
            f"{mismatch.record_id} into. Acknowledge the mismatch, or submit the request."
        )
    if operation.state == State.SUCCEEDED:
        raise ReviewError(
            f"{operation.key} already succeeded with record {operation.external_id}; record "
            f"{mismatch.record_id} is a second one. Acknowledge the mismatch once it is dealt with."
        )
    with transaction.atomic():
        _decide(mismatch, Mismatch.Status.ADOPTED, user=user, note=reason)
        resolutions.resolve_operation(
            operation,
            user=user,
            external_id=mismatch.record_id,
            reason=f"adopted from reconciliation mismatch {mismatch.pk}: {reason}",
            seen_at_destination=True,
        )
    return mismatch


def replay_mismatch(mismatch: Mismatch, *, user, reason: str) -> replays.Replay:
    """Send a ``missing_at_destination`` operation again. The operation is ``succeeded`` (final),
    so it is reopened first (``succeeded -> needs_review``, audited as ``reopened_missing`` with
    the decision, one transaction); then ``replays.replay_operation`` runs as on the operation's
    page: it asks the destination first (found: succeeded again, nothing sent; cannot tell:
    ``DuplicateRisk``) and sends under the same key only when the record is confirmed absent.

    When the replay itself is refused (``ReviewError``, e.g. ``DuplicateRisk`` or a changed
    configuration), the operation stays in needs_review, where its page offers the replay with
    the choices it needs; the mismatch is decided either way.
    """
    _require_review(user, mismatch)
    _require_reason(reason, mismatch)
    if mismatch.kind != Mismatch.Kind.MISSING_AT_DESTINATION:
        raise ReviewError(
            f"Only an operation whose record is missing can be replayed; this mismatch is {mismatch.kind}."
        )
    operation = _operation(mismatch)
    if operation is None:
        raise ReviewError(
            f"The operation {mismatch.reference} is gone (removed by retention): nothing can be "
            "replayed. Acknowledge the mismatch, or submit the request again."
        )
    if operation.state != State.SUCCEEDED:
        raise ReviewError(f"{operation.key} is {operation.state}, no longer succeeded: decide it on its own page.")
    actor = user.get_username()
    with transaction.atomic():
        _decide(mismatch, Mismatch.Status.REPLAYED, user=user, note=reason)
        reopened = transition_operation(
            operation,
            to_state=State.NEEDS_REVIEW,
            actor=actor,
            kind="reopened_missing",
            message=f"reconciliation audit found no record at the destination (mismatch {mismatch.pk}): {reason}",
            last_error_category="missing",
            last_error_message="the destination has no record of this operation",
        )
        if not reopened:
            raise ReviewError(f"{operation.key} changed meanwhile; reload it and decide again.")
    return replays.replay_operation(operation, user=user, reason=f"record missing at the destination: {reason}")


def _operation(mismatch: Mismatch) -> Operation | None:
    return Operation.objects.select_related("workspace").filter(pk=mismatch.operation_id).first()


def _decide(mismatch: Mismatch, status: str, *, user, note: str) -> None:
    now, actor = timezone.now(), user.get_username()
    decided = Mismatch.objects.filter(pk=mismatch.pk, status=Mismatch.Status.OPEN).update(
        status=status, decided_by=actor, decided_at=now, note=note[:500]
    )
    if not decided:
        mismatch.refresh_from_db(fields=["status"])
        raise ReviewError(f"Mismatch {mismatch.pk} is already {mismatch.status}.")
    mismatch.status, mismatch.decided_by, mismatch.decided_at, mismatch.note = status, actor, now, note[:500]


def _audit(mismatch: Mismatch, kind: str, *, user, reason: str) -> None:
    operation = _operation(mismatch)
    record_audit_event(
        actor=user.get_username(),
        kind=kind,
        operation=operation,
        workspace=None if operation else mismatch.workspace,
        message=f"mismatch {mismatch.pk} ({mismatch.kind}, {mismatch.reference}): {reason}",
    )


def _require_review(user, mismatch: Mismatch) -> None:
    if not roles.can(user, roles.REVIEW, mismatch.workspace_id):
        raise ReviewError(roles.refusal(user, roles.REVIEW, mismatch.workspace))


def _require_reason(reason: str, mismatch: Mismatch) -> None:
    if not reason.strip():
        raise ReviewError("Give a reason: it is kept with the decision and in the audit trail.")
    operation = _operation(mismatch)
    review.refuse_sensitive_reason(reason, *([operation] if operation else []))
