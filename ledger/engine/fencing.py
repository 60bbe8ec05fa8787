"""Fencing: every outcome of a claimed try is written under the claim's token, or not at all.

``commit_outcome`` (for a set, ``commit_outcomes``) runs a recording in its own transaction and keeps
the operations in memory true to the database when it fails (``snapshot``/``restore``); a
completion whose claim was taken over is refused and audited (``refuse_stale``, ``StaleClaim``).
"""

import logging

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Q

from ledger.core.bulk_sql import update_each
from ledger.core.transitions import record_audit_event
from ledger.engine.attempts import finish_attempt, new_attempt
from ledger.models import Attempt, Operation
from ledger.states import State

logger = logging.getLogger("ledger")


class StaleClaim(Exception):
    """The claim's fencing token no longer matches: someone else owns the operation now."""


# What the engine changes on an operation while a claim holds it.
_ENGINE_FIELDS = (
    "state",
    "attempts",
    "fencing_token",
    "lease_owner",
    "lease_expires_at",
    "next_attempt_at",
    "deadline",
    "result",
    "external_id",
    "last_error_category",
    "last_error_message",
    "updated_at",
)


def commit_outcome(operation: Operation, write):
    """Run ``write``, the transaction that records this claim's outcome, and keep the operation in
    memory true to the database whatever happens to it.

    ``transition_operation`` applies a move to the object as soon as its UPDATE ran; if the
    transaction then fails (a terminated connection, at the commit or before), the object would
    claim a state the database never stored, and the next step would start from it (``succeeded
    -> retrying``). So a failed ``write`` leaves the object as it was before. When the failure was
    the connection itself, the database is asked on a fresh connection: if the row is still ours
    and unrecorded, ``write`` runs once more; if it moved (the commit went through after all, or
    the claim was lost), the object is reloaded and there is nothing left to write.
    """
    token = operation.fencing_token
    before = snapshot(operation)
    try:
        return write()
    except (OperationalError, InterfaceError):
        restore(operation, before)
        logger.warning(
            "database connection lost recording the outcome of %s; writing it again", operation.key, exc_info=True
        )
    except BaseException:
        restore(operation, before)
        raise
    connection.close_if_unusable_or_obsolete()
    if not Operation.objects.filter(pk=operation.pk, state=State.PROCESSING, fencing_token=token).exists():
        operation.refresh_from_db(fields=_ENGINE_FIELDS)
        return None
    try:
        return write()
    except BaseException:
        restore(operation, before)
        raise


def commit_outcomes(operations: list[Operation], write) -> bool:
    """Run ``write``, the one transaction that records the outcomes of many claimed operations;
    True when it committed. Like ``commit_outcome``, a failed ``write`` leaves every operation in
    memory as it was. When the failure was the connection, a fresh connection tells whether the
    commit went through after all: if any row is still held, unrecorded, by its claim, nothing was
    written (one transaction) and False sends the caller to record them one at a time; otherwise
    the operations are reloaded. Any other failure is raised.
    """
    before = [(operation, snapshot(operation)) for operation in operations]
    try:
        write()
        return True
    except (OperationalError, InterfaceError):
        for operation, values in before:
            restore(operation, values)
        logger.warning(
            "database connection lost recording the outcomes of %d operations; recording them one at a time",
            len(operations),
            exc_info=True,
        )
    except BaseException:
        for operation, values in before:
            restore(operation, values)
        raise
    connection.close_if_unusable_or_obsolete()
    held = Q()
    for operation in operations:
        held |= Q(pk=operation.pk, fencing_token=operation.fencing_token)
    if Operation.objects.filter(held, state=State.PROCESSING).exists():
        return False
    for operation in operations:
        operation.refresh_from_db(fields=_ENGINE_FIELDS)
    return True


def renew_leases(operations: list[Operation], *, expires_at) -> int:
    """One UPDATE moving the lease of the rows of ``operations`` still ``processing`` under the
    token of the claim in hand to ``expires_at`` (a row someone else took over is left alone).
    Returns how many rows changed. It moves no state: a move under the claims' tokens is
    ``ledger.core.transitions.transition_many`` (``tokens``).

    The ORM spells this as an OR of (id, token) per row, and building those expressions costs about
    a millisecond per row; here the rows travel as one VALUES list.
    """
    return update_each(
        Operation,
        [operation.pk for operation in operations],
        match={"fencing_token": [operation.fencing_token for operation in operations]},
        each={},
        same={"lease_expires_at": expires_at},
        where={"state": State.PROCESSING},
    )


def snapshot(operation: Operation) -> dict:
    """What the engine may change on ``operation`` (for ``restore``, when a write fails)."""
    return {name: getattr(operation, name) for name in _ENGINE_FIELDS}


def restore(operation: Operation, values: dict) -> None:
    for name, value in values.items():
        setattr(operation, name, value)


def refuse_stale(operation, *, worker, token, started_at, attempt=None, begun=True) -> None:
    """Audit a completion that arrived after the claim was lost; apply nothing."""
    with transaction.atomic():
        if attempt is not None:
            finish_attempt(attempt, Attempt.Outcome.STALE)
        elif begun:
            new_attempt(operation, worker=worker, started_at=started_at, outcome=Attempt.Outcome.STALE)
        record_audit_event(
            actor=worker,
            kind="stale_completion_refused",
            operation=operation,
            message=f"claim {token} no longer holds the operation; outcome not applied",
        )
    logger.warning("stale completion refused for %s (claim %s)", operation.key, token)
