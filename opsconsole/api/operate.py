"""Decisions over the API (docs/api-for-flows.md): approve, reject, replay, resolve, cancel, take
and give back an operation, and apply or dismiss a conflict. Each route calls the service the
console calls, as the token's person, so the same rules hold (role, four eyes, the operation's
state) and the same audit event is written. A machine's token with ``operate`` replays, resolves,
cancels and decides conflicts as an operator of its workspace; approving, rejecting and taking are
a person's. Before the call the route asks the rules
themselves (``ledger.people.may``) only to answer each refusal with its status: 403 for who is
asking, 409 for the operation's state; the service asserts them again.

The management routes are mounted before the operation page's (``operations.router``), whose key
may hold slashes: ``/operations/{key}/approve`` must reach its own route first.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from ninja import Router
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ledger.actions import registry
from ledger.core.sensitive_notes import SensitiveNote
from ledger.models import Conflict, Operation
from ledger.people import (
    approvals,
    assignment,
    cancellations,
    conflict_decisions,
    may,
    replays,
    resolutions,
    review,
)
from ledger.states import State
from opsconsole.api import answers, operations, pauses
from opsconsole.api.operate_answers import (
    ACTING_REFUSED,
    DECISION_REFUSED,
    NO_SUCH_CONFLICT,
    ActionDone,
    ConflictDone,
    DoneStatus,
    InputRefused,
    StateReason,
    StateRefused,
    conflict_answer,
    forbidden,
    operation_item,
)
from opsconsole.api.problems import ApiProblem
from opsconsole.api.request_bodies import RETRY_AFTER, ReasonBody, json_body, read_body
from opsconsole.api.tokens import APPROVE, OPERATE, actor_of, reveals

decisions = Router(tags=["decisions"])
DONE = {200: ActionDone, **DECISION_REFUSED}


# --- the bodies -----------------------------------------------------------------------------------


class DecisionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fingerprint: str = Field(
        min_length=1, max_length=64, description="The operation's `fingerprint` as you read it: the payload decided on."
    )
    reason: str = Field("", max_length=500, description="Why; kept in the audit trail, shown to the workspace.")


class RejectBody(DecisionBody):
    reason: str = Field(max_length=500, pattern=r"\S", description="Why it is rejected (required).")


class ReplayBody(ReasonBody):
    accept_config_change: bool = Field(False, description="Replay under the action's changed configuration.")
    force_unknown: bool = Field(
        False, description="Replay although the destination cannot tell whether it already acted (it may act twice)."
    )


class ResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    external_id: str = Field(min_length=1, max_length=200, description="The destination's record id you found.")
    note: str = Field(max_length=500, pattern=r"\S", description="How you checked the destination.")

    @field_validator("external_id")
    @classmethod
    def printable(cls, value: str) -> str:
        value = value.strip()
        if not value or not value.isprintable():
            raise ValueError("must be printable text, not blank")
        return value


class TakeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    take_over: bool = Field(False, description="Take it from the person who holds it.")


# --- who asks, and what refuses -------------------------------------------------------------------


def person_of(request, doing: str):
    """The token's person, where only a person may act: approving and rejecting (four eyes signs
    off people), taking and giving back (an operation is taken by someone)."""
    if request.person is None:
        raise ApiProblem(
            403,
            answer=forbidden(
                "person_only",
                f"Only a person may {doing}: this token is a machine's. Use a token of the person who decides.",
            ),
        )
    return request.person


def refuse_role(refusal: str) -> None:
    if refusal:
        raise ApiProblem(403, answer=forbidden("role", refusal))


def refuse_state(refusal: str, operation: Operation, reason: StateReason = "wrong_state") -> None:
    if refusal:
        raise ApiProblem(409, answer=StateRefused(reason=reason, detail=refusal, state=State(operation.state)))


@contextmanager
def refused_by_service(
    operation: Operation, *, written_in: str = "reason", fields: dict[str, str] | None = None
) -> Iterator[None]:
    """A service's refusal left once the rules were asked: what the person wrote in the body's
    ``written_in`` (422; ``fields``: the body's field for each other label the service names, as
    resolve's "record id"), or what the operation became meanwhile or what its destination said (409)."""
    try:
        yield
    except SensitiveNote as exc:
        field = (fields or {}).get(exc.label, written_in)
        problem = answers.FieldProblem(field=field, message=str(exc))
        raise ApiProblem(422, answer=InputRefused(reason="sensitive_text", detail=str(exc), errors=[problem])) from None
    except (review.ReviewError, approvals.ApprovalError, assignment.AssignmentError) as exc:
        reason: StateReason = "changed_meanwhile"
        changes: list[str] = []
        if isinstance(exc, replays.ConfigChanged):
            reason, changes = "config_changed", [str(change) for change in exc.changes]
        elif isinstance(exc, replays.DuplicateRisk):
            reason = "duplicate_risk"
        elif isinstance(exc, assignment.HeldBySomeoneElse):
            reason = "held_by_someone_else"
        elif isinstance(exc, assignment.NothingToTake):
            reason = "wrong_state"
        now = Operation.objects.filter(pk=operation.pk).values_list("state", flat=True).first()
        state = State(now) if now is not None else None
        refused = StateRefused(reason=reason, detail=str(exc), state=state, changes=changes)
        raise ApiProblem(409, answer=refused) from None


def done(request, status: DoneStatus, message: str, operation: Operation):
    """The answer to a decision: what it did, and the operation as it is now."""
    now = Operation.objects.select_related("workspace", "assigned_to").get(pk=operation.pk)
    item = operation_item(now, reveal=reveals(request))
    return answers.respond(ActionDone(status=status, message=message, operation=item), 200)


# --- approve and reject: a person's token with the approve scope ---------------------------------


def _decide(request, key: str, *, approving: bool):
    verb = "approve" if approving else "reject"
    person = person_of(request, f"{verb} an operation")
    body = read_body(request, DecisionBody if approving else RejectBody)
    operation = operations.find_operation(request, key)
    refuse_role(may.approve_refusal(person, operation))
    refuse_state(may.decide_refusal(operation), operation)
    if body.fingerprint != operation.fingerprint:
        refuse_state(
            f"The payload of {operation.key} is not the one you saw (fingerprint {body.fingerprint[:12]}…, now "
            f"{operation.fingerprint[:12]}…): read the operation again and decide on what it holds now.",
            operation,
            "stale_fingerprint",
        )
    if four_eyes := may.own_work_refusal(person, operation, verb):
        raise ApiProblem(403, answer=forbidden("four_eyes", four_eyes))
    decide = approvals.approve_operation if approving else approvals.reject_operation
    with refused_by_service(operation):
        decide(operation, user=person, note=body.reason, fingerprint=body.fingerprint)
    said = "Approved: it runs now." if approving else "Rejected: it never runs."
    return done(request, "approved" if approving else "rejected", f"{said} ({operation.key})", operation)


@decisions.post(
    "/operations/{path:key}/approve",
    auth=APPROVE,
    response=DONE,
    openapi_extra=json_body(DecisionBody),
    summary="Approve an operation awaiting approval, for the payload you saw (its fingerprint)",
)
def approve(request, key: str):
    """A person's token with the `approve` scope, whose person approves in the workspace (approver,
    admin) and did not submit, change or replay the operation (four eyes)."""
    return _decide(request, key, approving=True)


@decisions.post(
    "/operations/{path:key}/reject",
    auth=APPROVE,
    response=DONE,
    openapi_extra=json_body(RejectBody),
    summary="Reject an operation awaiting approval (final: it never runs), for the payload you saw",
)
def reject(request, key: str):
    return _decide(request, key, approving=False)


# --- review: a person's token with the operate scope ---------------------------------------------


@decisions.post(
    "/operations/{path:key}/replay",
    auth=OPERATE,
    response=DONE,
    openapi_extra=json_body(ReplayBody),
    summary="Run an operation that needs review again, under its own key (the destination is asked first)",
)
def replay(request, key: str):
    actor = actor_of(request)
    body = read_body(request, ReplayBody)
    operation = operations.find_operation(request, key)
    refuse_role(may.review_refusal(actor, operation))
    refuse_state(may.replay_refusal(operation), operation)
    with refused_by_service(operation):
        replayed = replays.replay_operation(
            operation,
            user=actor,
            reason=body.reason,
            accept_duplicate_risk=body.force_unknown,
            accept_config_change=body.accept_config_change,
        )
    if replayed.verdict == "found":
        return done(request, "succeeded", f"Nothing was sent: {replayed.lookup}.", operation)
    said = f"Replayed {operation.key}" + (f" ({replayed.lookup})" if replayed.lookup else "")
    return done(
        request,
        "replayed",
        said + ("; accepting the duplicate risk." if replayed.verdict == "forced" else "."),
        operation,
    )


@decisions.post(
    "/operations/{path:key}/resolve",
    auth=OPERATE,
    response=DONE,
    openapi_extra=json_body(ResolveBody),
    summary="Record the destination's record you found by hand: the operation is succeeded",
)
def resolve(request, key: str):
    actor = actor_of(request)
    body = read_body(request, ResolveBody)
    operation = operations.find_operation(request, key)
    refuse_role(may.review_refusal(actor, operation))
    refuse_state(may.mark_succeeded_refusal(operation, registry.get(operation.action)), operation)
    with refused_by_service(operation, written_in="note", fields={"record id": "external_id"}):
        resolutions.resolve_operation(operation, user=actor, external_id=body.external_id, reason=body.note)
    return done(request, "resolved", f"Resolved {operation.key}: destination record {body.external_id}.", operation)


@decisions.post(
    "/operations/{path:key}/cancel",
    auth=OPERATE,
    response=DONE,
    openapi_extra=json_body(ReasonBody),
    summary="Give up on an operation that has not run to an end (the destination is asked first)",
)
def cancel(request, key: str):
    actor = actor_of(request)
    body = read_body(request, ReasonBody)
    operation = operations.find_operation(request, key)
    refuse_role(may.review_refusal(actor, operation))
    refuse_state(may.cancel_refusal(operation), operation)
    with refused_by_service(operation):
        cancelled = cancellations.cancel_operation(operation, user=actor, reason=body.reason)
    if cancelled.verdict == "found":
        return done(request, "succeeded", f"Nothing was cancelled: {cancelled.lookup}.", operation)
    said = f"Cancelled {operation.key}" + (f" ({cancelled.lookup})." if cancelled.lookup else ".")
    return done(request, "cancelled", said, operation)


@decisions.post(
    "/operations/{path:key}/take",
    auth=OPERATE,
    response=DONE,
    openapi_extra=json_body(TakeBody, required=False),
    summary="Take an operation: mark it as yours, so that two people do not work the same one",
)
def take(request, key: str):
    person = person_of(request, "take an operation")
    body = read_body(request, TakeBody, optional=True)
    operation = operations.find_operation(request, key)
    if not assignment.may_act(person, operation):
        refuse_role(f"{person.get_username()} may not act on operations of workspace {operation.workspace.slug}.")
    with refused_by_service(operation):
        changed = assignment.take_operation(operation, user=person, take_over=body.take_over)
    if not changed:
        return done(request, "unchanged", f"You had taken {operation.key} already.", operation)
    return done(request, "taken", f"You took {operation.key}.", operation)


@decisions.post(
    "/operations/{path:key}/release",
    auth=OPERATE,
    openapi_extra=RETRY_AFTER,
    response={200: ActionDone, **ACTING_REFUSED},
    summary="Give back an operation you took",
)
def release(request, key: str):
    person = person_of(request, "give back an operation")
    operation = operations.find_operation(request, key)
    if assignment.release_operation(operation, user=person):
        return done(request, "released", f"You gave {operation.key} back.", operation)
    return done(request, "unchanged", f"You had not taken {operation.key}; nothing changed.", operation)


# --- conflicts ------------------------------------------------------------------------------------


def _conflict_decision(request, conflict_id: int, *, applying: bool):
    actor = actor_of(request)
    body = read_body(request, ReasonBody)
    conflict = (
        Conflict.objects.select_related("operation", "operation__workspace", "delivery")
        .filter(pk=conflict_id, operation__workspace=request.workspace)
        .first()
    )
    if conflict is None:
        raise ApiProblem(404, answer=NO_SUCH_CONFLICT)
    operation = conflict.operation
    refuse_role(may.conflict_refusal(actor, conflict, applying=applying))
    if conflict.status != Conflict.Status.OPEN:
        refuse_state(f"Conflict {conflict.pk} is already {conflict.status}.", operation)
    decide = conflict_decisions.apply_conflict if applying else conflict_decisions.dismiss_conflict
    with refused_by_service(operation):
        decide(conflict, user=actor, reason=body.reason)
    now = Operation.objects.select_related("workspace", "assigned_to").get(pk=operation.pk)
    reveal = reveals(request)
    said = "Applied" if applying else "Dismissed"
    stands = "the incoming payload" if applying else "the recorded payload"
    body_out = ConflictDone(
        status="applied" if applying else "dismissed",
        message=f"{said} conflict {conflict.pk} on {operation.key}: {stands} stands.",
        conflict=conflict_answer(conflict, now, reveal=reveal),
        operation=operation_item(now, reveal=reveal),
    )
    return answers.respond(body_out, 200)


CONFLICT_DONE = {200: ConflictDone, **DECISION_REFUSED}


@decisions.post(
    "/conflicts/{int:conflict_id}/apply",
    auth=OPERATE,
    response=CONFLICT_DONE,
    openapi_extra=json_body(ReasonBody),
    summary="Apply a conflict's incoming payload to its operation, while it has not run",
)
def apply_conflict(request, conflict_id: int):
    return _conflict_decision(request, conflict_id, applying=True)


@decisions.post(
    "/conflicts/{int:conflict_id}/dismiss",
    auth=OPERATE,
    response=CONFLICT_DONE,
    openapi_extra=json_body(ReasonBody),
    summary="Dismiss a conflict: the recorded payload stands",
)
def dismiss_conflict(request, conflict_id: int):
    return _conflict_decision(request, conflict_id, applying=False)


# The management routes, mounted in this order: the decisions, the pauses, then the operations'
# list and page, whose key may hold slashes and would otherwise take `/operations/{key}/approve`.
router = Router()
router.add_router("", decisions)
router.add_router("", pauses.router)
router.add_router("", operations.router)
