"""Deciding conflicts: one, as the operation page and the ``conflict`` command do (dismiss it, or
apply its payload while the operation has not run), or many at once, as the console's conflicts
inbox does: dismiss a selection (every open conflict of an operation, or some of several operations)
with one reason, or apply one conflict and dismiss the other open ones of its operation.

Who may: ``ledger.people.may.conflict_refusal``. Dismissing needs the review role; applying a side of
a conflict in sensitive fields (a refund's amount) needs seeing them too, and approvers, who see
them, may decide such a conflict either way.

Many at once: each conflict is decided and audited on its own, with the kind and message of a single
decision (``conflict_dismissed``, ``conflict_applied``), all in one transaction: a refusal
(no reason, no role to decide one of them, an apply its operation can no longer take) writes nothing.

Locks: the selected conflicts still open, ``SELECT .. FOR UPDATE`` in id order (two callers cannot
deadlock), before anything is written; then the operations they held (``ledger.people.holds``), which
run once no conflict of theirs is open. Someone deciding the same conflicts at the same moment waits
for the first to commit, then finds them decided: those are skipped and reported, not decided again,
and the rest of the selection is decided. Pressing the same button twice is therefore safe.
"""

from collections.abc import Collection
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ledger.core import audit_chain, roles
from ledger.core.transitions import record_audit_event
from ledger.intake.reservation import CONFLICT_HOLD
from ledger.models import AuditEvent, Conflict, Contribution, Operation
from ledger.people import holds, may
from ledger.people.review import ReviewError, action_of, refuse_sensitive_reason, require
from ledger.states import State

OPEN, DISMISSED = Conflict.Status.OPEN, Conflict.Status.DISMISSED


# --- one conflict ----------------------------------------------------------------------------------


def dismiss_conflict(conflict: Conflict, *, user, reason: str) -> Conflict:
    """Keep the recorded payload: the incoming one was a mistake (or is stale) and stays unapplied."""
    require(may.conflict_refusal(user, conflict, applying=False))
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
    refuse (and the conflict stays open: the transaction is rolled back). Refused, before anything is
    written, to a person who may not see the sensitive fields it differs in (``may.conflict_refusal``).
    """
    require(may.conflict_refusal(user, conflict, applying=True))
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
        contributions = []
        if roles.person_of(user) is not None:  # a machine's decision is nobody's work (four eyes)
            contributions.append(Contribution(operation=operation, user=user, kind=Contribution.Kind.CHANGED))
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
    taking = states_taking_a_payload(action_of(operation))
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


# --- many at once ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decided:
    """What a decision did: the conflicts it dismissed (and the one it applied), and those of the
    selection already decided by then (by someone else, or by an earlier press), left as they were."""

    dismissed: list[Conflict]
    skipped: list[Conflict]
    applied: Conflict | None = None


def open_ids(operation_ids: Collection[int], *, seen: int) -> list[int]:
    """The ids of the operations' open conflicts up to ``seen``, the newest conflict the person was
    shown: one that arrived since then is not decided unseen."""
    return list(
        Conflict.objects.filter(status=OPEN, operation_id__in=operation_ids, pk__lte=seen)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def dismiss_conflicts(conflict_ids: Collection[int], *, user, reason: str) -> Decided:
    """Dismiss each of the conflicts still open, keeping its operation's recorded payload; ``user``
    needs the review role in every workspace they belong to."""
    ids = _selection(conflict_ids, reason)
    with transaction.atomic():
        locked, skipped = _lock(ids, user=user)
        refuse_sensitive_reason(reason, *_concerned(locked))
        holds.lock_held({conflict.operation_id for conflict in locked})  # before _dismiss takes the chain
        dismissed = _dismiss(locked, user=user, reason=reason)
        _release(dismissed, user=user, reason=reason)
        return Decided(dismissed=dismissed, skipped=skipped)


def apply_dismissing_the_rest(conflict: Conflict, *, user, reason: str, rest: Collection[int]) -> Decided:
    """Apply ``conflict``'s payload to its operation (``apply_conflict``: only before the
    operation runs) and dismiss ``rest``, other conflicts of the same operation, with the one reason.
    Refused as a whole, nothing dismissed, when the apply is refused or ``conflict`` is decided."""
    ids = _selection({conflict.pk, *rest}, reason)
    with transaction.atomic():
        locked, skipped = _lock(ids, user=user)
        if any(other.operation_id != conflict.operation_id for other in locked + skipped):
            raise ReviewError(
                f"Only conflicts of {conflict.operation.key} can be dismissed with its conflict "
                f"{conflict.pk} applied; nothing was changed."
            )
        if conflict.pk not in {other.pk for other in locked}:
            conflict.refresh_from_db(fields=["status", "decided_by"])
            raise ReviewError(
                f"Conflict {conflict.pk} is already {conflict.status} (by {conflict.decided_by}); nothing was changed."
            )
        refuse_sensitive_reason(reason, *_concerned(locked))
        apply_conflict(conflict, user=user, reason=reason)
        dismissed = _dismiss([other for other in locked if other.pk != conflict.pk], user=user, reason=reason)
        holds.release_decided(
            {conflict.operation_id: decision_message(conflict, "applied", reason)}, actor=user.get_username()
        )
        return Decided(dismissed=dismissed, skipped=skipped, applied=conflict)


def _release(dismissed: list[Conflict], *, user, reason: str) -> None:
    """Release the operations the dismissed conflicts held, where no conflict of theirs is open any
    more (``ledger.people.holds``), each audited with the last of its conflicts dismissed."""
    last = {conflict.operation_id: conflict for conflict in sorted(dismissed, key=lambda c: c.pk)}
    holds.release_decided(
        {pk: decision_message(conflict, "dismissed", reason) for pk, conflict in last.items()},
        actor=user.get_username(),
    )


def _selection(conflict_ids: Collection[int], reason: str) -> set[int]:
    if not reason.strip():
        raise ReviewError(
            "Give a reason: it is kept in the audit trail of every conflict decided. Nothing was changed."
        )
    ids = set(conflict_ids)
    if not ids:
        raise ReviewError("Select at least one conflict; nothing was changed.")
    return ids


def _lock(ids: set[int], *, user) -> tuple[list[Conflict], list[Conflict]]:
    """The conflicts of ``ids`` still open, locked, and those already decided; refused (before any
    write) for an id that names no conflict or one ``user`` may not dismiss (``may.conflict_refusal``)."""
    # Lock order (docs/architecture.md): the conflicts' rows, in id order, before the audit chain
    # (appended last).
    locked = list(
        Conflict.objects.filter(pk__in=ids, status=OPEN)
        .select_related("operation__workspace")
        .select_for_update(of=("self",))
        .order_by("pk")
    )
    skipped = []
    if len(locked) < len(ids):
        skipped = list(
            Conflict.objects.filter(pk__in=ids - {c.pk for c in locked})
            .select_related("operation__workspace")
            .order_by("pk")
        )
        missing = ids - {c.pk for c in locked + skipped}
        if missing:
            raise ReviewError(f"No conflict {', '.join(map(str, sorted(missing)))}; nothing was changed.")
    for conflict in locked + skipped:
        require(may.conflict_refusal(user, conflict, applying=False))
    return locked, skipped


def _concerned(conflicts: list[Conflict]) -> list:
    """What a reason deciding ``conflicts`` concerns: each conflict and its operation."""
    return [*{c.operation_id: c.operation for c in conflicts}.values(), *conflicts]


def _dismiss(conflicts: list[Conflict], *, user, reason: str) -> list[Conflict]:
    """Dismiss the locked open ``conflicts``: one guarded UPDATE, an audit event for each."""
    if not conflicts:
        return []
    actor, now = user.get_username(), timezone.now()
    decided = Conflict.objects.filter(pk__in=[c.pk for c in conflicts], status=OPEN).update(
        status=DISMISSED, decided_by=actor, decided_at=now
    )
    if decided != len(conflicts):
        # Not while _lock holds the rows; the guarded UPDATE still checks rather than trusts it.
        raise ReviewError("Some of these conflicts were decided meanwhile; nothing was changed. Look again.")
    for conflict in conflicts:
        conflict.status, conflict.decided_by, conflict.decided_at = DISMISSED, actor, now
    audit_chain.append(
        [
            AuditEvent(
                operation=c.operation,
                workspace_id=c.operation.workspace_id,
                actor=actor,
                kind="conflict_dismissed",
                message=conflict_message(c, reason)[:500],
            )
            for c in conflicts
        ]
    )
    return conflicts
