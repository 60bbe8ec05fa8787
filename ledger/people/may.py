"""What a person may do to an operation, in one place: ``what_may`` is what the console's operation
page offers (and says others could do) and the admin's operation page lists, and each rule below is
what the review and approval services assert before they write, raising their own error with the
rule's words.

A rule returns why it refuses, or ``""`` where it allows, so a service can ask it at the point it
always has (after checking the person's own input) and a page can say why a button is missing.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from ledger.actions import registry
from ledger.core import privacy, roles
from ledger.engine.lookups import may_have_acted
from ledger.models import Contribution, Operation
from ledger.people import holds
from ledger.states import TRANSITIONS, State

# Where a try may have reached the destination and a person can still act on it.
LANDING_STATES = (State.NEEDS_REVIEW, State.RETRYING, State.UNKNOWN, State.PENDING)

_CONTRIBUTED: dict[str, str] = {
    Contribution.Kind.SUBMITTED: "submitted",
    Contribution.Kind.CHANGED: "changed",
    Contribution.Kind.REPLAYED: "replayed",
}


@dataclass(frozen=True)
class Verdict:
    """May the person do it: true, or false with the ``refusal`` that says why. ``by_role``: refused
    for the person's role alone, so someone holding the role could."""

    refusal: str = ""
    by_role: bool = False

    def __bool__(self) -> bool:
        return not self.refusal

    @property
    def open_to_the_role(self) -> bool:
        """Allowed to whoever holds the role it needs (this person, or another)."""
        return not self.refusal or self.by_role


@dataclass(frozen=True)
class May:
    """What one person may do to one operation, as loaded."""

    review: bool  # the review role in the operation's workspace (operator or admin)
    replay: Verdict
    cancel: Verdict
    mark_succeeded: Verdict  # record the destination's record id found by hand (resolve)
    look_up: Verdict  # ask the destination now about an unknown operation
    decide: Verdict  # approve or reject (four eyes)
    landed: bool  # a try may have reached the destination: a replay and a cancel ask it first


def what_may(user, operation: Operation, *, contributions: Iterable[Contribution] | None = None) -> May:
    """``contributions``: the operation's, where the caller has read them (else what four eyes
    needs is read here)."""
    action = registry.get(operation.action)
    landed = action is not None and operation.state in LANDING_STATES and may_have_acted(operation, action)
    review = review_refusal(user, operation)
    approve = approve_refusal(user, operation)
    decide = decide_refusal(operation)
    if not decide and not approve:
        decide = own_work_refusal(user, operation, "approve or reject", contributions=contributions)
    return May(
        review=not review,
        replay=_verdict(replay_refusal(operation), review),
        cancel=_verdict(cancel_refusal(operation), review),
        mark_succeeded=_verdict(mark_succeeded_refusal(operation, action, landed=landed), review),
        look_up=_verdict(look_up_refusal(operation), review),
        decide=_verdict(decide, approve),
        landed=landed,
    )


def _verdict(rule: str, role: str) -> Verdict:
    """What the rule refuses, nobody may do; what it allows, the role decides."""
    if rule:
        return Verdict(rule)
    return Verdict(role, by_role=bool(role))


# --- the roles --------------------------------------------------------------------------------------


def review_refusal(user, operation: Operation) -> str:
    """Replay, cancel, resolve, look up and decide conflicts need the review role (operator, admin)."""
    if roles.can(user, roles.REVIEW, operation.workspace_id):
        return ""
    return roles.refusal(user, roles.REVIEW, operation.workspace)


def approve_refusal(user, operation: Operation) -> str:
    """Approving and rejecting need the approve role (approver, admin)."""
    if roles.can(user, roles.APPROVE, operation.workspace_id):
        return ""
    return roles.refusal(user, roles.APPROVE, operation.workspace)


# --- conflicts ------------------------------------------------------------------------------------


def conflict_refusal(user, conflict, *, applying: bool) -> str:
    """Deciding a conflict needs the review role (operator, admin). Applying one side of a conflict
    whose differences include a sensitive field (``sensitive_differences``) needs seeing those values
    too: nobody chooses between two amounts they cannot read. An operator may still dismiss it (the
    recorded payload stays), or hand it to someone who sees them: an approver (or admin), who may
    apply or dismiss such a conflict though approvers do not review otherwise."""
    operation = conflict.operation
    hidden = sensitive_differences(conflict)
    sees = privacy.may_view_sensitive(user, operation.workspace_id)
    if hidden and sees and roles.can(user, roles.APPROVE, operation.workspace_id):
        return ""
    if not roles.can(user, roles.REVIEW, operation.workspace_id):
        return roles.refusal(user, roles.REVIEW, operation.workspace)
    if applying and hidden and not sees:
        return (
            f"Conflict {conflict.pk} on {operation.key} differs in {', '.join(hidden)}, which "
            f"{user.get_username()} may not see: only {deciders_of_sensitive()} of workspace "
            f"{operation.workspace.slug} may apply one side of it. Dismiss it (the recorded payload stays), "
            "or assign the operation to one of them."
        )
    return ""


def sensitive_differences(conflict) -> list[str]:
    """The labels of the conflict's differing fields that its action declares sensitive (every one,
    for an action no longer defined: which were sensitive cannot be told)."""
    action = registry.get(conflict.operation.action)
    sensitive = privacy.sensitive_fields(conflict.operation.action)
    names = [d.get("field", "") for d in conflict.differences]
    hidden = [name for name in names if sensitive is None or name in sensitive]
    return [action.field_label(name) if action is not None else name for name in hidden]


def deciders_of_sensitive() -> str:
    """Who may apply a side of a conflict in sensitive fields: "approvers and admins"."""
    granting = [r for r in roles.roles_granting(roles.VIEW_SENSITIVE) if roles.APPROVE in roles.GRANTS[r]]
    return " and ".join(f"{role}s" for role in granting)


# --- the operation's state -------------------------------------------------------------------------


def replay_refusal(operation: Operation) -> str:
    if operation.state != State.NEEDS_REVIEW:
        return f"Only an operation that needs review can be replayed; {operation.key} is {operation.state}."
    if holds.is_held(operation):
        return (
            f"{operation.key} is held by a conflicting delivery and has not run: apply or dismiss the conflict "
            "to let it run (a replay would run it without deciding which payload is meant)."
        )
    return ""


def cancel_refusal(operation: Operation) -> str:
    if State.CANCELLED in TRANSITIONS[State(operation.state)]:
        return ""
    allowed = ", ".join(sorted(s for s, targets in TRANSITIONS.items() if State.CANCELLED in targets))
    return f"{operation.key} is {operation.state}; only {allowed} operations can be cancelled."


def mark_succeeded_refusal(
    operation: Operation, action, *, seen_at_destination: bool = False, landed: bool | None = None
) -> str:
    """Whether a person may record that the destination has the operation's record: only an unknown
    operation, or one that needs review after a try that may have reached the destination (not
    after definite refusals alone), unless the reconciliation audit saw a record carrying our key
    (``seen_at_destination``). ``landed``: ``may_have_acted``, where the caller has asked it."""
    if operation.state not in (State.UNKNOWN, State.NEEDS_REVIEW):
        return (
            f"Only an unknown operation or one that needs review can be resolved; {operation.key} is {operation.state}."
        )
    if holds.is_held(operation):
        return (
            f"{operation.key} is held by a conflicting delivery and never ran: the destination has no record of it. "
            "Apply or dismiss the conflict to let it run, or cancel it."
        )
    if action is None:
        return unregistered(operation)
    if not action.external:
        return (
            f"{operation.action} has no external destination to find a record at; "
            "replay or cancel the operation instead."
        )
    if seen_at_destination or operation.state == State.UNKNOWN:
        return ""
    if not (may_have_acted(operation, action) if landed is None else landed):
        return (
            f"Every try of {operation.key} was refused before it acted, so the destination holds no record of it; "
            "replay or cancel the operation instead."
        )
    return ""


def look_up_refusal(operation: Operation) -> str:
    if operation.state == State.UNKNOWN:
        return ""
    return f"Only an unknown operation is looked up at the destination; {operation.key} is {operation.state}."


def decide_refusal(operation: Operation) -> str:
    if operation.state == State.PENDING_APPROVAL:
        return ""
    return f"{operation.key} is {operation.state}; only an operation awaiting approval can be decided."


def own_work_refusal(
    user, operation: Operation, verb: str, *, contributions: Iterable[Contribution] | None = None
) -> str:
    """Four eyes: nobody who submitted, changed or replayed an operation approves or rejects it."""
    kinds = own_work(user, operation.contributions.filter(user=user) if contributions is None else contributions)
    if not kinds:
        return ""
    done = " and ".join(_CONTRIBUTED[kind] for kind in kinds)
    return (
        f"{user.get_username()} {done} {operation.key}, so cannot {verb} it: four eyes means "
        "another person with the approve permission must."
    )


def own_work(user, contributions: Iterable[Contribution]) -> list[str]:
    """What ``user`` did to an operation (submitted, changed, replayed), of its contributions."""
    return sorted({contribution.kind for contribution in contributions if contribution.user_id == user.pk})


def unregistered(operation: Operation) -> str:
    return f"Action {operation.action!r} is not registered; {operation.key} cannot run."
