"""Performing claimed operations and recording what came of them, under each claim's fencing token.

One operation at a time (``perform_claimed``): an internal action's effect commits with its
``succeeded``; an external try is begun (its Attempt written, its lease renewed), the destination
is called outside any transaction, and the outcome is recorded.

Many at a time, for ``ledger.engine.processing`` once one operation of a group succeeded:
``perform_internal_set`` commits the effects (``perform_many``), Attempts and ``succeeded``
transitions of a set of internal operations in one transaction; external tries are begun together
(``begin_calls``), called from pool threads (``call_destination``, which does nothing but the call)
and their successes recorded together (``finish_calls``). When a set cannot be written (a stale
claim, an error, a lost connection) nothing of it is kept and it is done one at a time instead,
where every failure and every stale claim is recorded on its own.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ledger.actions import ActionDefinition, UnknownAction, get_action
from ledger.core import configuration
from ledger.engine import faults
from ledger.engine.attempts import finish_attempt, new_attempt, open_attempt
from ledger.engine.failed import record_failure
from ledger.engine.fencing import StaleClaim, commit_outcome, commit_outcomes, refuse_stale, renew_leases
from ledger.engine.succeeded import record_success, record_successes
from ledger.models import Attempt, Operation
from ledger.outcomes import PermanentError, Success

logger = logging.getLogger("ledger")


def perform_claimed(operation: Operation, *, worker: str) -> None:
    """Perform one claimed operation and record its outcome (guarded by the claim's token)."""
    try:
        action = get_action(operation.action)
    except UnknownAction:
        record_failure(
            operation,
            None,
            PermanentError(f"action {operation.action!r} is not registered"),
            started_at=timezone.now(),
            worker=worker,
        )
        return
    if needs_approval(operation, action):
        # Defence in depth: the state machine already keeps unapproved work out of `pending`.
        record_failure(
            operation,
            action,
            PermanentError("no approval covers this payload"),
            started_at=timezone.now(),
            worker=worker,
        )
        return
    if action.external:
        _perform_external(operation, action, worker=worker)
    else:
        _perform_internal(operation, action, worker=worker)


def needs_approval(operation: Operation, action: ActionDefinition) -> bool:
    return action.consequential and not operation.approved_as_is()


# --- internal actions -------------------------------------------------------------------------


def _perform_internal(operation: Operation, action: ActionDefinition, *, worker: str) -> None:
    token = operation.fencing_token
    started_at = timezone.now()

    def perform_and_record():
        with transaction.atomic():
            success = action.perform(operation)
            attempt = new_attempt(
                operation,
                worker=worker,
                started_at=started_at,
                outcome=Attempt.Outcome.OK,
                external_id=success.external_id,
                counted=False,
            )
            record_success(operation, success, attempt=attempt, worker=worker, token=token)
            faults.fault_point("before_outcome_commit")

    try:
        # Safe to run twice: a transaction that did not commit took its effect with it.
        commit_outcome(operation, perform_and_record)
    except StaleClaim:
        # The effect was rolled back with the refused outcome: nothing happened twice.
        refuse_stale(operation, worker=worker, token=token, started_at=started_at)
        return
    except Exception as exc:  # noqa: BLE001  classified below, never swallowed: recorded and logged
        record_failure(operation, action, exc, started_at=started_at, worker=worker)
        return
    faults.crash_point("after_commit")


def perform_internal_set(operations: list[Operation], action: ActionDefinition, *, worker: str) -> bool:
    """Perform internal ``operations`` of ``action`` together: their effects (``perform_many``),
    their ok Attempts and their fenced ``succeeded`` transitions commit in one transaction. True
    when it committed; False when anything failed, and then nothing of the set was kept."""
    started_at = timezone.now()

    def perform_and_record():
        with transaction.atomic():
            successes = action.perform_many(operations)
            record_successes(operations, successes, worker=worker, started_at=started_at)
            faults.fault_point("before_outcome_commit")

    try:
        done = commit_outcomes(operations, perform_and_record)
    except StaleClaim:
        logger.info(
            "a set of %d %s operations holds a lost claim; performing them one at a time", len(operations), action.name
        )
        return False
    except Exception as exc:  # noqa: BLE001  not swallowed: each operation meets it again on its own
        logger.warning(
            "performing %d %s operations as a set failed (%s); performing them one at a time",
            len(operations),
            action.name,
            type(exc).__name__,
        )
        return False
    if done:
        faults.crash_point("after_commit")
    return done


# --- external actions -------------------------------------------------------------------------


@dataclass
class Call:
    """An external try that was begun: its Attempt row is written, its request may leave."""

    operation: Operation
    action: ActionDefinition
    attempt: Attempt
    started_at: datetime
    worker: str

    @property
    def token(self) -> int:
        return self.attempt.fencing_token


def _perform_external(operation: Operation, action: ActionDefinition, *, worker: str) -> None:
    call = begin_call(operation, action, worker=worker)
    if call is None:
        return
    outcome: Success | Exception
    try:
        outcome = action.perform(operation)  # outside any transaction: this is the network call
    except Exception as exc:  # noqa: BLE001  classified in record_failure
        outcome = exc
    finish_call(call, outcome)


def begin_call(operation: Operation, action: ActionDefinition, *, worker: str) -> Call | None:
    """Begin one try: its Attempt is written and its lease renewed before any request leaves.
    A claim that was lost meanwhile begins nothing: audited, and None."""
    started_at = timezone.now()
    lease_expires_at = started_at + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)
    with transaction.atomic():
        renewed = renew_leases([operation], expires_at=lease_expires_at)
        if renewed:
            attempt = open_attempt(operation, action, worker=worker, started_at=started_at)
            attempt.save(force_insert=True)
    if not renewed:
        refuse_stale(operation, worker=worker, token=operation.fencing_token, started_at=started_at, begun=False)
        return None
    operation.lease_expires_at = lease_expires_at
    return Call(operation, action, attempt, started_at, worker)


def begin_calls(operations: list[Operation], *, worker: str) -> list[Call] | None:
    """Begin a try for each of ``operations`` in one transaction: one UPDATE renewing their leases,
    guarded per row by its claim, and one INSERT of their Attempts. None, and nothing begun, when
    a claim was lost meanwhile: ``begin_call`` each of them then (which refuses that one)."""
    started_at = timezone.now()
    lease_expires_at = started_at + timedelta(seconds=settings.OPSCONSOLE_LEASE_SECONDS)
    actions = [get_action(operation.action) for operation in operations]
    with transaction.atomic():
        renewed = renew_leases(operations, expires_at=lease_expires_at)
        if renewed == len(operations):
            attempts = Attempt.objects.bulk_create(
                [
                    open_attempt(operation, action, worker=worker, started_at=started_at, config_version=digest)
                    for operation, action, digest in zip(
                        operations, actions, configuration.digests_for(operations), strict=True
                    )
                ]
            )
        else:
            transaction.set_rollback(True)
    if renewed != len(operations):
        return None
    for operation in operations:
        operation.lease_expires_at = lease_expires_at
    return [
        Call(operation, action, attempt, started_at, worker)
        for operation, action, attempt in zip(operations, actions, attempts, strict=True)
    ]


def call_destination(action: ActionDefinition, operation: Operation) -> Success:
    """A pool thread's whole job: the call to the destination. The database belongs to the worker's
    own thread (one connection per worker); a query from here is refused rather than opening one
    more connection per thread."""
    with connection.execute_wrapper(_refuse_query):
        try:
            return action.perform(operation)
        finally:
            connection.close()  # had perform connected before its query was refused


def _refuse_query(execute, sql, params, many, context):
    raise RuntimeError("an external action's perform ran a database query from a call thread")


def finish_call(call: Call, outcome: Success | Exception) -> None:
    """Record what one begun try came to."""
    operation, worker = call.operation, call.worker
    if isinstance(outcome, Exception):
        record_failure(operation, call.action, outcome, started_at=call.started_at, worker=worker, attempt=call.attempt)
        return
    faults.crash_point("after_external_call")  # the destination acted; we have not recorded it
    # Kept on the attempt even if the outcome is refused as stale: reconciliation can use it.
    call.attempt.external_id = outcome.external_id

    def record():
        with transaction.atomic():
            finish_attempt(call.attempt, Attempt.Outcome.OK, counted=False)
            record_success(operation, outcome, attempt=call.attempt, worker=worker, token=call.token)
            faults.fault_point("before_outcome_commit")

    try:
        # The destination acted: if the database loses this write, it is written again rather than
        # left to the lease (whose expiry would make the operation unknown and cost a lookup).
        commit_outcome(operation, record)
    except StaleClaim:
        refuse_stale(operation, worker=worker, token=call.token, started_at=call.started_at, attempt=call.attempt)


def finish_calls(calls: list[Call], successes: list[Success]) -> bool:
    """Record several begun tries that succeeded, in one transaction. False when that could not be
    written (nothing of it was): ``finish_call`` each of them then, which writes a success again
    after a lost connection (the destination acted) and refuses a stale claim."""
    for call, success in zip(calls, successes, strict=True):
        faults.crash_point("after_external_call")
        call.attempt.external_id = success.external_id
    operations = [call.operation for call in calls]

    def record():
        with transaction.atomic():
            record_successes(operations, successes, worker=calls[0].worker, attempts=[call.attempt for call in calls])
            faults.fault_point("before_outcome_commit")

    try:
        done = commit_outcomes(operations, record)
    except StaleClaim:
        done = False
    except Exception as exc:  # noqa: BLE001  not swallowed: the caller records each call on its own
        logger.warning(
            "recording %d successful calls together failed (%s); recording them one at a time",
            len(calls),
            type(exc).__name__,
        )
        done = False
    return done
