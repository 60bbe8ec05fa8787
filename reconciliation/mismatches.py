"""What a person does with a mismatch the reconciliation audit found: acknowledge it, adopt the
destination's record, or replay the operation whose record is missing; and, for many at once,
acknowledge them with one reason or ask the destination about each by key (a bulk lookup).

Each needs the review capability in the mismatch's workspace (``ledger.core.roles``), decides the
mismatch once (a guarded UPDATE from ``open``) and is audited with the person. Adopting and
replaying act on the operation through the review services (``ledger.people.resolutions``,
``ledger.people.replays``), so the state machine, its guards and the replay's safety (the
destination is asked before anything is sent) are the same as on the operation's page.

Many at once: all or nothing. Every mismatch must be one the person may decide, still open, and
the reason may quote no sensitive value of any of their operations; else nothing is written. A
bulk lookup never resends: it is a ``lookup`` bulk action (``ledger.people.bulk_actions``) of
the mismatches' operations, run by the workers, whose answers the mismatches page shows beside
each (``reconciliation.selectors``); a person then acknowledges those found, and replays those
confirmed absent (the replay asks once more before it sends).
"""

from django.db import transaction
from django.utils import timezone

from ledger.core import roles, sensitive_notes
from ledger.core.transitions import audit_event, record_audit_event, record_audit_events, transition_operation
from ledger.models import BulkAction, Operation
from ledger.people import bulk_actions, replays, resolutions, review
from ledger.people.review import ReviewError, SensitiveReason
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


MAX_MISMATCHES = bulk_actions.MAX_OPERATIONS
LOOKUP_REASON = "asked whether the destination holds the records the reconciliation audit found missing"


def acknowledge_mismatches(mismatch_ids: list[int], *, user, reason: str) -> int:
    """Acknowledge every mismatch of ``mismatch_ids`` with one reason, each audited (on its
    operation's trail where it has one), in one transaction; returns how many. All or nothing:
    ``ReviewError`` (nothing written) for an empty or too large selection, a mismatch not visible
    or not to be decided by ``user`` there, one no longer open, or a missing or sensitive reason."""
    reason = reason.strip()
    chosen = _chosen(mismatch_ids, user)
    if not reason:
        raise ReviewError("Give a reason: it is kept with each decision and in the audit trail.")
    operations = Operation.objects.filter(pk__in=[m.operation_id for m in chosen if m.operation_id])
    # The reason goes into the audit trail of every operation: none of their sensitive values may be in it.
    sensitive_notes.refuse_sensitive_note(
        reason, operations.only("key", "action", "payload", "result").iterator(), error=SensitiveReason
    )
    now, actor = timezone.now(), user.get_username()
    with transaction.atomic():
        decided = Mismatch.objects.filter(pk__in=[m.pk for m in chosen], status=Mismatch.Status.OPEN).update(
            status=Mismatch.Status.ACKNOWLEDGED, decided_by=actor, decided_at=now, note=reason[:500]
        )
        if decided != len(chosen):
            # Rolled back: what the person saw is not what is there.
            raise ReviewError(
                f"{len(chosen) - decided} of the {len(chosen)} mismatches were decided meanwhile; nothing was "
                "changed. Reload the list and decide again."
            )
        by_pk = operations.select_related("workspace").in_bulk()
        record_audit_events(
            [
                audit_event(
                    actor=actor,
                    kind="mismatch_acknowledged",
                    operation=by_pk.get(mismatch.operation_id),
                    workspace=None if mismatch.operation_id in by_pk else mismatch.workspace,
                    message=f"mismatch {mismatch.pk} ({mismatch.kind}, {mismatch.reference}): {reason}",
                )
                for mismatch in chosen
            ]
        )
    return decided


def look_up_mismatches(mismatch_ids: list[int], *, user, token: str, reason: str = "") -> tuple[BulkAction, bool]:
    """Ask the destination, by key, about the operation of each ``missing_at_destination``
    mismatch of ``mismatch_ids``: a ``lookup`` bulk action run by the workers (returned, with
    whether it is new: the form's one-time ``token`` makes a second press find the first). Nothing
    is sent and no mismatch is decided. All or nothing: ``ReviewError`` for a selection as
    ``acknowledge_mismatches`` refuses it, or holding another kind or a mismatch whose operation
    is gone; ``bulk_actions.BulkActionError`` for a sensitive reason."""
    chosen = _chosen(mismatch_ids, user)
    others = [m for m in chosen if m.kind != Mismatch.Kind.MISSING_AT_DESTINATION or m.operation_id is None]
    if others:
        raise ReviewError(
            f"{len(others)} of the {len(chosen)} mismatches selected are not missing at the destination, or their "
            "operation is gone: only a missing record is looked up. Filter by kind, then select again."
        )
    return bulk_actions.submit_bulk_action(
        user=user,
        kind=BulkAction.Kind.LOOKUP,
        reason=reason.strip() or LOOKUP_REASON,
        token=token,
        operation_ids=[m.operation_id for m in chosen],
    )


def _chosen(mismatch_ids: list[int], user) -> list[Mismatch]:
    """The open mismatches ``mismatch_ids`` names, each one ``user`` may decide; else ReviewError."""
    wanted = list(dict.fromkeys(mismatch_ids))
    if not wanted:
        raise ReviewError("Select at least one mismatch; nothing was changed.")
    if len(wanted) > MAX_MISMATCHES:
        raise ReviewError(f"Select at most {MAX_MISMATCHES:,} mismatches at once; nothing was changed.")
    chosen = list(
        roles.visible(Mismatch.objects.filter(pk__in=wanted), user, capability=roles.REVIEW).select_related("workspace")
    )
    if len(chosen) != len(wanted):
        raise ReviewError("Some of the selected mismatches are not in a workspace where you may decide them.")
    if any(m.status != Mismatch.Status.OPEN for m in chosen):
        raise ReviewError("Some of the selected mismatches are already decided; nothing was changed. Reload the list.")
    return chosen


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
