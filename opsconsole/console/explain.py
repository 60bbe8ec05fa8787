"""Who can act on an operation when the person looking cannot, in the words of the rules that decide
it: the roles of ``ledger.core.roles`` (approve: approver, admin; review: operator, admin) and the four
eyes of ``ledger.people.approvals`` (nobody who submitted, changed or replayed an operation approves it).

Nothing here grants or refuses anything (the services do, by the rules of ``ledger.people.may``);
it only says what a page shows when it offers no button. At most ``NAMES_SHOWN`` people are named
per role, read in one bounded query.
"""

from ledger.core import roles
from ledger.core.roles import APPROVE, REVIEW
from ledger.models import Membership, Operation
from ledger.people import holds
from ledger.people.may import May
from ledger.states import State

NAMES_SHOWN = 5


def review_actions(operation: Operation, may: May) -> list[str]:
    """What a person with the review permission could do to ``operation`` while it waits for one
    (unknown, needs review), by the rules of ``ledger.people.may``; work still under way may be
    cancelled too, but needs nobody."""
    if operation.state not in (State.UNKNOWN, State.NEEDS_REVIEW):
        return []
    offered = []
    if may.look_up.open_to_the_role:
        offered.append("look it up at the destination now")
    if may.replay.open_to_the_role:
        offered.append("replay it")
    elif holds.is_held(operation):
        offered.append("apply or dismiss its conflict")
    if may.mark_succeeded.open_to_the_role:
        offered.append("resolve it with the destination's record id")
    if may.cancel.open_to_the_role:
        offered.append("cancel it")
    return offered


def who_can_act(user, operation: Operation, may: May, *, own_work: list[str], contributor_ids: set[int]) -> list[str]:
    """Sentences for ``user`` about the decisions on ``operation`` the page does not offer them."""
    said = []
    workspace = operation.workspace
    role = roles.roles_of(user).get(operation.workspace_id)
    if operation.state == State.PENDING_APPROVAL:
        may_approve = not may.decide.by_role  # the role, whatever four eyes says
        if not may_approve:
            said.append(
                f"An approver of workspace {workspace.slug} must sign off on this payload before it runs"
                f" ({_people(operation, APPROVE, skip=contributor_ids)})."
            )
        if own_work:
            done = " and ".join(own_work)  # the kinds of Contribution are the verbs: submitted, changed...
            if may_approve:
                said.append(
                    f"You {done} this operation, so another approver must approve or reject it (four "
                    f"eyes; {_people(operation, APPROVE, skip=contributor_ids | {user.pk})})."
                )
            else:
                said.append(
                    f"You {done} this operation, so you could not approve or reject it even with the "
                    "approve permission (four eyes)."
                )
    offered = review_actions(operation, may)
    if offered and not may.review:
        who = (
            f"an {' or '.join(roles.roles_granting(REVIEW))} of workspace {workspace.slug} can "
            f"{_listed(offered)} ({_people(operation, REVIEW)})."
        )
        said.append(
            f"You are {_a(role)} {role} of workspace {workspace.slug}; {who}" if role else who[0].upper() + who[1:]
        )
    return said


def _a(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _listed(things: list[str]) -> str:
    return things[0] if len(things) == 1 else ", ".join(things[:-1]) + " or " + things[-1]


def _people(operation: Operation, capability: str, *, skip: set[int] = frozenset()) -> str:
    """ "approvers and admins: alice, bob" - the active members holding ``capability`` in the
    operation's workspace, but those in ``skip`` (four eyes); a superuser may act anywhere too."""
    granting = [str(role) for role in roles.roles_granting(capability)]
    members = (
        Membership.objects.filter(workspace_id=operation.workspace_id, role__in=granting, user__is_active=True)
        .exclude(user_id__in=skip)
        .order_by("user__username")
        .values_list("user__username", flat=True)[: NAMES_SHOWN + 1]
    )
    names = list(members)
    kinds = " and ".join(f"{role}s" for role in granting)
    if not names:
        return f"there is none yet: a member needs the {' or '.join(granting)} role; a superuser may too"
    shown = ", ".join(names[:NAMES_SHOWN]) + (" and more" if len(names) > NAMES_SHOWN else "")
    return f"{kinds}: {shown}"
