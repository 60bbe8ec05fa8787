"""``GET /api/v1/claims/due``: the work a flow that polls may claim now (``ledger.callers.due``),
oldest first, a page at a time (docs/claims.md, "Due work")."""

from typing import Literal, cast

from django.conf import settings
from django.urls import reverse
from ninja import Router
from pydantic import Field

from ledger.actions import registry
from ledger.callers import due
from opsconsole.api.answers import REFUSED, Answer, FieldProblem, InvalidInput, Timestamp, respond
from opsconsole.api.problems import ApiProblem
from opsconsole.api.tokens import CLAIMS

router = Router()
DueState = Literal["pending", "retrying"]


class DueOperation(Answer):
    """One operation its caller may claim now: claim it with its action and data (`POST /claims`)."""

    key: str
    action: str
    state: DueState = Field(description="`retrying`: its next try's time has come.")
    summary: str = Field(description="What it is about, in one line; never a sensitive value.")
    attempts: int
    due_since: Timestamp = Field(description="When it became due: its arrival, or its next try's time.")
    created_at: Timestamp
    link: str = Field(description="Its page in the console.")


class DueWork(Answer):
    status: Literal["ok"] = "ok"
    operations: list[DueOperation] = Field(description="Oldest first.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


PARAMETERS = {"action", "limit", "cursor"}
DUE_RESPONSES = {200: DueWork, 401: REFUSED[401], 403: REFUSED[403], 422: InvalidInput, 503: REFUSED[503]}


def _refused(field: str, message: str) -> ApiProblem:
    problem = InvalidInput(reason="invalid_input", errors=[FieldProblem(field=field, message=message)])
    return ApiProblem(422, answer=problem)


@router.get(
    "/due",
    auth=CLAIMS,
    response=DUE_RESPONSES,
    summary="The operations of actions you perform that may be claimed now, oldest first",
)
def due_work(request, action: str = "", limit: str = str(due.DEFAULT_LIMIT), cursor: str = ""):
    """Pending, or retrying with the next try's time come; not held by a pause. A flow that polls
    claims each (`POST /claims`); one told by a subscription's `operation.due` need not poll."""
    if unknown := sorted(set(request.GET) - PARAMETERS):
        raise _refused(unknown[0] or "query", "is not a parameter of this list (action, limit, cursor)")
    if not (limit.isascii() and limit.isdigit()) or not 1 <= int(limit) <= due.MAX_LIMIT:
        raise _refused("limit", f"must be a whole number from 1 to {due.MAX_LIMIT}")
    if action and (action not in registry or not registry[action].performed_by_caller):
        raise _refused("action", "must name an action its caller performs")
    try:
        page = due.due_page(workspace=request.workspace, action=action, limit=int(limit), cursor=cursor)
    except due.BadCursor as exc:
        raise _refused("cursor", str(exc)) from None
    body = DueWork(
        operations=[
            DueOperation(
                key=operation.key,
                action=operation.action,
                state=cast(DueState, operation.state),
                summary=registry[operation.action].summarise(operation.payload) if operation.action in registry else "",
                attempts=operation.attempts,
                due_since=operation.due_since,  # type: ignore[attr-defined]  # annotated by the read
                created_at=operation.created_at,
                link=settings.OPSCONSOLE_SITE_URL + reverse("console:operation", args=[operation.pk]),
            )
            for operation in page.operations
        ],
        next_cursor=page.next_cursor,
    )
    return respond(body, 200)
