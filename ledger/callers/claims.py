"""Claiming an operation its caller performs: reserve the event as intake does, then, in one short
transaction holding the operation's row, either claim it (a lease, a new fencing token, the try's
Attempt opened with the idempotency key) or say why not (done, in progress, retry later, held, a
person must decide ...). The row lock makes concurrent claimers of one key take turns: exactly one
is answered ``claimed``.

A lease that expired, or a processing deadline that passed, is moved here as the sweep would move
it (``ledger.engine.expiry``), after the row is let go, and the claimer answered by the state it
moved to: an expired claim's operation is ``unknown``, never claimed again by itself.

The API claims through ``ledger.callers.claiming``: the same decision in one database call
(``ledger_claim``), its answers worded here (``decided``, ``held``), and what it leaves to Python
(refusals, ``latest_wins``, subscribed workspaces, overdue operations) done here.
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from ledger.actions import ActionDefinition, get_action, registry
from ledger.callers.tokens import claim_of, token_for
from ledger.core import announcements, tallies
from ledger.core.held_time import HeldOperation, with_held_time
from ledger.core.selectors import switch_over, waiting
from ledger.core.transitions import OperationT, transition_many
from ledger.engine import expiry
from ledger.engine.attempts import open_attempt
from ledger.engine.fencing import renew_leases
from ledger.engine.performing import needs_approval
from ledger.intake import submit
from ledger.intake.decoding import storable, storable_text_problem
from ledger.intake.submit import IntakeResult
from ledger.models import Attempt, Control, Delivery, Operation, Ordering, Workspace
from ledger.states import CLAIMABLE_STATES, State

# What a claim is answered (the API's ``status``).
CLAIMED = "claimed"
DONE = "done"
IN_PROGRESS = "in_progress"
RETRY_LATER = "retry_later"
HELD = "held"
WAITING = "waiting"
AWAITING_APPROVAL = "awaiting_approval"
BLOCKED = "blocked"  # the request itself was refused, as intake refuses an event
EXTENDED = "extended"
STALE_TOKEN = "stale_token"
NOT_FOUND = "not_found"

# A state no claim can act from, and what it tells the caller.
DECIDED = {
    State.PENDING_APPROVAL: (AWAITING_APPROVAL, "waiting for a person to approve it: do not act; claim again later"),
    State.NEEDS_REVIEW: ("needs_review", "a person must decide before anyone acts again: do not act"),
    State.UNKNOWN: (
        "unknown",
        "a try may have acted and nobody knows: a lookup or a person decides before anyone acts again",
    ),
    State.CANCELLED: ("cancelled", "a person cancelled it: do not act"),
    State.REJECTED: ("rejected", "an approver rejected it: do not act"),
    State.SUPERSEDED: ("superseded", "a newer version of the request replaced it: do not act"),
}
# What a claim's delivery is recorded as coming from.
SOURCE = Delivery.Source.API
ACT_NOW = "act now, sending idempotency_key to the destination"
# How long a claimer held by a pause, or waiting for an earlier version, is asked to wait.
_ASK_AGAIN_AFTER = 60


@dataclass
class Answer:
    """What a claim, heartbeat or outcome report is answered."""

    status: str
    operation: Operation | None = None
    message: str = ""
    retry_after: int | None = None  # seconds, for the answers that ask the caller to come back
    token: str = ""
    attempt: Attempt | None = None
    held_by: Control | None = None
    intake: IntakeResult | None = None  # status BLOCKED: the refusal, as intake answers it

    @property
    def key(self) -> str:
        if self.operation is not None:
            return self.operation.key
        return self.intake.key if self.intake is not None else ""


def no_such_operation() -> Answer:
    """The answer for a key that names no operation of the workspace (or one purged meanwhile)."""
    return Answer(NOT_FOUND, message="no operation has this key in the workspace")


@dataclass
class Overdue:
    """Not answered: an operation met overdue while deciding (its lease expired, or its deadline
    passed), moved as the sweep would before the claimer is answered by where it went."""

    operation: Operation
    late: bool = False  # its processing deadline passed (else: its lease expired)


def claim(*, workspace: Workspace, raw: Any, submitted_by: str, person=None) -> Answer:
    """Reserve the event ``raw`` (an envelope, plus ``lease_seconds``) and claim its operation for
    the caller ``submitted_by``, or say why it may not act. ``raw`` may instead name an operation
    already recorded by its ``key`` (and ``lease_seconds``): due work a flow was told of or listed
    (``GET /api/v1/claims/due``), whose data it never saw."""
    sender = {"source": SOURCE, "submitted_by": submitted_by, "person": person}
    if isinstance(raw, dict) and "key" in raw and "action" not in raw:
        return claim_recorded(workspace=workspace, raw=raw, **sender)
    raw = dict(raw) if isinstance(raw, dict) else raw
    lease_seconds = raw.pop("lease_seconds", None) if isinstance(raw, dict) else None
    action = registry.get(raw.get("action")) if isinstance(raw, dict) and isinstance(raw.get("action"), str) else None
    problem = _workers_action(action) or (lease_problem(lease_seconds) if action is not None else None)
    if problem is not None:
        return _refused(problem, workspace=workspace, sender=sender)
    with announcements.quiet_due():  # the claimer is taking it: not announced as due to anyone
        reserved = submit.submit_event(workspace=workspace, raw=raw, **sender)
    if reserved.blocked:
        return Answer(BLOCKED, operation=reserved.operation, intake=reserved)
    if action is None or reserved.operation is None:
        # Intake knew an action this claim did not look up a moment before (configured meanwhile):
        # whether a caller may perform it was not asked, so nothing is claimed yet.
        return Answer(IN_PROGRESS, reserved.operation, "the action's configuration changed: claim again", retry_after=1)
    lease = timedelta(seconds=lease_seconds) if lease_seconds is not None else action.claim_lease
    return take(reserved.operation, action, lease=lease, actor=submitted_by)


def claim_recorded(*, workspace: Workspace, raw: dict, **sender) -> Answer:
    """Claim the recorded operation ``raw["key"]`` names, with ``raw["lease_seconds"]`` if given.
    Nothing is reserved: a key no operation of the workspace has is answered not found."""
    if problem := _by_key_problem(raw) or lease_problem(raw.get("lease_seconds")):
        return _refused(problem, workspace=workspace, sender=sender)
    operation = Operation.objects.filter(workspace=workspace, key=raw["key"]).first()
    if operation is None:
        return no_such_operation()
    action = registry.get(operation.action)
    if action is None or not action.performed_by_caller:
        problem = ("key", f"the operation is of {operation.action}, which is not an action its caller performs")
        return _refused(problem, workspace=workspace, sender=sender)
    lease_seconds = raw.get("lease_seconds")
    lease = timedelta(seconds=lease_seconds) if lease_seconds is not None else action.claim_lease
    return take(operation, action, lease=lease, actor=sender["submitted_by"])


def _refused(problem: tuple[str, str], *, workspace: Workspace, sender: dict) -> Answer:
    """A claim refused before anything is claimed: recorded as intake records a refused delivery."""
    field, message = problem
    refused = submit.record_blocked_delivery(
        workspace=workspace,
        reason="invalid_input",
        errors=[{"field": field, "message": message}],
        http_status=422,
        **sender,
    )
    return Answer(BLOCKED, intake=refused)


def _by_key_problem(raw: dict) -> tuple[str, str] | None:
    if unknown := sorted(set(raw) - {"key", "lease_seconds"}):
        return storable(unknown[0]), "is not a field of a claim by key (key, lease_seconds)"
    if not isinstance(raw["key"], str) or not raw["key"]:
        return "key", "must be an operation's key (text)"
    if problem := storable_text_problem(raw["key"]):  # no key holds it, and PostgreSQL cannot compare it
        return "key", problem
    return None


def lease_problem(value: Any) -> tuple[str, str] | None:
    """What is wrong with a lease a caller asked for (None: nothing, or none asked for)."""
    low, high = settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MIN, settings.OPSCONSOLE_CLAIM_LEASE_SECONDS_MAX
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return "lease_seconds", f"must be a whole number of seconds from {low} to {high}"
    return None


def _workers_action(action: ActionDefinition | None) -> tuple[str, str] | None:
    if action is None or action.performed_by_caller:
        return None
    return "action", f"{action.name} is performed by opsconsole's workers: submit it to /api/v1/events"


def take(operation: Operation, action: ActionDefinition, *, lease: timedelta, actor: str) -> Answer:
    """Claim the recorded ``operation`` (an overdue one moved first, as the sweep would), in Python."""
    answer = _take_once(operation.pk, action, lease=lease, actor=actor)
    if isinstance(answer, Overdue):
        _move_overdue(answer, actor=actor)
        answer = _take_once(operation.pk, action, lease=lease, actor=actor)
    if isinstance(answer, Overdue):
        # Another process is moving it this very moment (the sweep): a moment later it has moved.
        return Answer(IN_PROGRESS, answer.operation, "the operation is changing state: claim again", retry_after=1)
    return answer


def _take_once(operation_id: int, action: ActionDefinition, *, lease: timedelta, actor: str) -> Answer | Overdue:
    now = timezone.now()
    with transaction.atomic():
        operation = locked(with_held_time(Operation.objects.filter(pk=operation_id)))
        if operation is None:
            return no_such_operation()
        answer = standing(operation, action, now)
        if isinstance(answer, Answer):
            # Lock order (docs/architecture.md): the row (held), the tallies, then the claim's move.
            tallies.count(tallies.CLAIMS, action=operation.action, answer=answer.status)
            if answer.status == CLAIMED:
                answer = _claim(operation, action, lease=lease, actor=actor, now=now)
    return answer


def standing(operation: HeldOperation, action: ActionDefinition, now: datetime) -> Answer | Overdue:
    """What a claim of ``operation`` (its row held) is answered now: ``CLAIMED`` when it may be.
    ``ledger_claim`` (``sql/claim.sql``) decides the same in SQL, and its answers are worded here
    (``decided``, ``held``)."""
    state = operation.state
    if state == State.SUCCEEDED:
        return decided(operation, DONE, now)
    if state == State.PROCESSING:
        if operation.lease_expires_at and operation.lease_expires_at > now:
            return decided(operation, IN_PROGRESS, now)
        return Overdue(operation)
    if state not in CLAIMABLE_STATES:
        return decided(operation, DECIDED[State(state)][0], now)
    return _claimable_standing(operation, action, now)


def _claimable_standing(operation: HeldOperation, action: ActionDefinition, now: datetime) -> Answer | Overdue:
    # A pause first: time held by a pause does not count against the deadline (the sweep, too,
    # leaves held work alone), so held work is not late.
    switch = switch_over(list(Control.objects.filter(paused=True)), operation.workspace_id, operation.action)
    if switch is not None:
        return held(operation, switch)
    if operation.next_attempt_at and operation.next_attempt_at > now:
        return decided(operation, RETRY_LATER, now)
    if operation.held_deadline and operation.held_deadline <= now:
        return Overdue(operation, late=True)
    if (
        operation.ordered == Ordering.IN_ORDER
        and operation.version is not None  # as waiting() asks: version > 1
        and Operation.objects.filter(pk=operation.pk).filter(waiting()).exists()
    ):
        return decided(operation, WAITING, now)
    if needs_approval(operation, action):
        return decided(operation, AWAITING_APPROVAL, now)
    return Answer(CLAIMED, operation)


def held(operation: Operation, switch: Control) -> Answer:
    """The answer of a claim a pause holds."""
    why = f": {switch.reason}" if switch.reason else ""
    return Answer(
        HELD,
        operation,
        f"paused ({switch.scope_label}){why}: do not act; claim again later",
        retry_after=_ASK_AGAIN_AFTER,
        held_by=switch,
    )


def decided(operation: Operation, status: str, now: datetime) -> Answer:
    """The answer ``status`` (one that claims nothing and names no pause), worded for ``operation``."""
    if status == DONE:
        return Answer(DONE, operation, "already performed: use its result, do not act")
    if status == IN_PROGRESS:
        assert operation.lease_expires_at is not None  # processing under a lease
        return Answer(
            IN_PROGRESS,
            operation,
            "another caller holds the claim: do not act; claim again after Retry-After",
            retry_after=_seconds_until(operation.lease_expires_at, now),
        )
    if status == RETRY_LATER:
        assert operation.next_attempt_at is not None
        return Answer(
            RETRY_LATER,
            operation,
            "a try failed and the next one is not due yet: claim again after Retry-After",
            retry_after=_seconds_until(operation.next_attempt_at, now),
        )
    if status == WAITING:
        assert operation.version is not None
        return Answer(
            WAITING,
            operation,
            f"version {operation.version - 1} of this request has not finished: claim again later",
            retry_after=_ASK_AGAIN_AFTER,
        )
    if status == AWAITING_APPROVAL:
        return Answer(AWAITING_APPROVAL, operation, DECIDED[State.PENDING_APPROVAL][1])
    # A state no claim acts from (ledger_claim answers "decided": the state says which).
    status, message = DECIDED[State(operation.state)]
    return Answer(status, operation, message)


def _claim(
    operation: HeldOperation, action: ActionDefinition, *, lease: timedelta, actor: str, now: datetime
) -> Answer:
    """Claim the held row for the caller: processing under the next fencing token and a lease, and
    its try's Attempt opened at once (the caller acts as soon as it is answered)."""
    transition_many(
        [operation],
        to_state=State.PROCESSING,
        actor=actor,
        kind="claimed",
        # The time a pause held it is given to its deadline now (ledger.core.held_time).
        same={"lease_owner": actor, "lease_expires_at": now + lease, "deadline": operation.held_deadline},
        increment=("attempts", "fencing_token"),
        tokens=[operation.fencing_token],
        message=f"claim {operation.fencing_token + 1}: the caller performs it",
        raise_if_any_stays=ClaimChanged,
        now=now,
    )
    # Lock order (docs/architecture.md): after the chain, only new rows.
    attempt = open_attempt(operation, action, worker=actor, started_at=now)
    attempt.save(force_insert=True)
    return Answer(CLAIMED, operation, ACT_NOW, token=token_for(operation), attempt=attempt)


class ClaimChanged(RuntimeError):
    """The held row was not claimable under its state and token: only a bug could do that."""


def heartbeat(*, workspace: Workspace, key: str, token: str, lease_seconds: int | None, actor: str) -> Answer:
    """Extend the lease of the claim ``token`` holds (by ``lease_seconds``, or the action's lease)."""
    with transaction.atomic():
        operation = locked(keyed(workspace, key))
        if operation is None:
            return no_such_operation()
        now = timezone.now()  # once the row is held: the sweep cannot be moving it meanwhile
        answer = current_claim(operation, token, now)
        if answer is None:
            lease = (
                timedelta(seconds=lease_seconds)
                if lease_seconds is not None
                else get_action(operation.action).claim_lease
            )
            renew_leases([operation], expires_at=now + lease)
            operation.lease_expires_at = now + lease
            return Answer(EXTENDED, operation, "the lease is extended")
    return stale_after(answer, actor=actor)


def current_claim(operation: Operation, token: str, now: datetime) -> Answer | Overdue | None:
    """None when ``token`` is the claim ``operation`` (its row held) is held by, with its lease
    running; else why not (``STALE_TOKEN``, or an expired lease, moved by ``stale_after``)."""
    claim = claim_of(token, operation)
    if claim is None:
        return Answer(STALE_TOKEN, operation, "this token was never issued for this operation: change nothing")
    if claim != operation.fencing_token or operation.state != State.PROCESSING:
        return Answer(
            STALE_TOKEN, operation, f"claim {claim} no longer holds the operation (it is {operation.state}): do not act"
        )
    if not operation.lease_expires_at or operation.lease_expires_at <= now:
        return Overdue(operation)
    return None


def stale_after(answer: Answer | Overdue, *, actor: str) -> Answer:
    """The answer to a token whose claim is over; an expired lease is moved first (to unknown)."""
    if isinstance(answer, Answer):
        return answer
    _move_overdue(answer, actor=actor)
    operation = answer.operation
    operation.refresh_from_db()
    return Answer(
        STALE_TOKEN,
        operation,
        f"the lease expired before an outcome was reported; the operation is {operation.state}: "
        "a lookup or a person decides",
    )


def _move_overdue(overdue: Overdue, *, actor: str) -> None:
    """Move an operation met overdue as the sweep would (guarded: if it moved meanwhile, nothing)."""
    if overdue.late:
        expiry.send_late_to_review(overdue.operation, actor=actor)
    else:
        expiry.recover_expired_lease(overdue.operation, timezone.now(), actor=actor)


def keyed(workspace: Workspace, key: str) -> QuerySet[Operation]:
    """The operation of ``key`` in the workspace, as a query; a key the database cannot hold (NUL,
    a lone surrogate) names none and is not even asked."""
    if storable_text_problem(key):
        return Operation.objects.none()
    return Operation.objects.filter(workspace=workspace, key=key)


def locked(operations: QuerySet[OperationT]) -> OperationT | None:
    # FOR NO KEY UPDATE: an intake that references the row (a duplicate's delivery) is not blocked.
    return operations.select_for_update(no_key=True, of=("self",)).select_related("workspace").first()


def _seconds_until(moment: datetime, now: datetime) -> int:
    return max(1, math.ceil((moment - now).total_seconds()))
