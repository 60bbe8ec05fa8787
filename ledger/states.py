"""The operation state machine: one table, read at a glance.

The table is enforced where states change, by ``ledger.core.transitions.transition_many`` (and its
one-row case ``transition_operation``): a guarded ``UPDATE ... WHERE id = .. AND state = ..`` that only
moves along an edge listed here, plus a ``CheckConstraint`` on the column so no other write can store
an unknown state. SQL that moves states itself lists the from-states ``sql_edges`` gives
(tests/ledger/test_sql_edges.py reads them back from the database).
"""

from django.db import models


class State(models.TextChoices):
    PENDING_APPROVAL = "pending_approval"
    PENDING = "pending"
    PROCESSING = "processing"
    RETRYING = "retrying"
    UNKNOWN = "unknown"
    NEEDS_REVIEW = "needs_review"
    SUCCEEDED = "succeeded"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"


S = State

# What people read for each state (the console's badges, tabs, filters and exports' readers): the
# values stay the code's words, the labels are sentences' words. Not the TextChoices' labels: those
# are part of the column's migration state.
LABELS: dict[State, str] = {
    S.PENDING_APPROVAL: "Awaiting approval",
    S.PENDING: "Pending",
    S.PROCESSING: "Processing",
    S.RETRYING: "Retrying",
    S.UNKNOWN: "Outcome unknown",
    S.NEEDS_REVIEW: "Needs review",
    S.SUCCEEDED: "Succeeded",
    S.REJECTED: "Rejected",
    S.CANCELLED: "Cancelled",
    S.SUPERSEDED: "Superseded",
}

# from state -> the states it may move to (docs/design.md section 4).
TRANSITIONS: dict[State, frozenset[State]] = {
    # pending_approval -> needs_review: nobody decided within the action's approval window.
    # pending_approval/pending/retrying -> superseded: a newer version of the request arrived under
    # latest_wins before this one ran (ledger.intake.ordering).
    S.PENDING_APPROVAL: frozenset({S.PENDING, S.REJECTED, S.NEEDS_REVIEW, S.SUPERSEDED}),
    # pending/retrying -> needs_review: the sweep found the processing deadline passed.
    # pending/retrying -> succeeded: an internal set finished in its claim (ledger_finish_claimed):
    # performed, claimed and recorded in one transaction, never processing in a committed state.
    S.PENDING: frozenset({S.PROCESSING, S.SUCCEEDED, S.CANCELLED, S.SUPERSEDED, S.NEEDS_REVIEW}),
    # processing -> pending: the sweep found the lease of an internal action expired; nothing
    # outside our database happened, so the operation simply runs again.
    S.PROCESSING: frozenset({S.SUCCEEDED, S.RETRYING, S.NEEDS_REVIEW, S.UNKNOWN, S.PENDING}),
    S.RETRYING: frozenset({S.PROCESSING, S.SUCCEEDED, S.CANCELLED, S.NEEDS_REVIEW, S.SUPERSEDED}),
    S.UNKNOWN: frozenset({S.SUCCEEDED, S.RETRYING, S.NEEDS_REVIEW}),
    S.NEEDS_REVIEW: frozenset({S.PENDING, S.PENDING_APPROVAL, S.SUCCEEDED, S.CANCELLED}),
    # succeeded -> needs_review: reconciliation audit found the record missing; a person reopens
    # it to replay through review (reconciliation.mismatches), which asks the destination first.
    S.SUCCEEDED: frozenset({S.NEEDS_REVIEW}),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
    S.SUPERSEDED: frozenset(),
}

# A person's way out of a final state: the state stays final (no worker or sweep moves it out;
# retention may purge it).
REOPEN_EDGES: dict[State, State] = {S.SUCCEEDED: S.NEEDS_REVIEW}

TERMINAL_STATES = frozenset(state for state, targets in TRANSITIONS.items() if targets <= {REOPEN_EDGES.get(state)})

# States a worker may claim from (when due and not paused).
CLAIMABLE_STATES = frozenset({S.PENDING, S.RETRYING})

# States a conflicting delivery may hold an operation in (its action's on_conflict: hold): it has
# not run. The hold is the edge to needs_review (ledger_reserve, ledger.people.holds).
HOLDABLE_STATES = (S.PENDING_APPROVAL, S.PENDING)

# What waits for a person (the console's queue, /metrics' review items), in the order the queue
# lists them. The queue's partial indexes (ledger.models.core) are conditioned on this list, in
# this order, as their migrations froze it: another order would need a migration.
ATTENTION_STATES = (S.NEEDS_REVIEW, S.UNKNOWN, S.PENDING_APPROVAL)

# Work still to be done, by a worker or a person (what a service level counts), in the order of
# the state machine.
UNFINISHED_STATES = tuple(state for state in S if state not in TERMINAL_STATES)


def can_transition(from_state: str, to_state: str) -> bool:
    return State(to_state) in TRANSITIONS[State(from_state)]


def sql_edges(to_state: str) -> tuple[State, ...]:
    """The states a move to ``to_state`` may start from, by the table, sorted: the list SQL that
    moves states itself guards its UPDATE with (``ledger_finish_claimed``, migration 0029)."""
    return tuple(sorted(state for state in S if can_transition(state, to_state)))


def label(state: str) -> str:
    """The state as people read it ("needs_review": "Needs review"); an unknown value as it is."""
    try:
        return LABELS[State(state)]
    except ValueError:
        return state
