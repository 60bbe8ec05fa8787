"""Reading operations over the API (scope ``read``): the queue's list, a page at a time, and one
operation with its history. Masked as the console masks them for the token's person and role (a
machine's token sees no sensitive value)."""

from enum import StrEnum
from typing import Literal

from django.db.models import QuerySet
from ninja import Query, Router, Schema
from pydantic import Field

from ledger.actions import registry
from ledger.core import privacy
from ledger.intake import decoding
from ledger.models import Control, Operation
from ledger.reads import keyset, work_lists
from ledger.states import ATTENTION_STATES, State
from opsconsole.api import answers, operate_answers
from opsconsole.api.operate_answers import READ_REFUSED, InputRefused, OperationDetail, OperationPage
from opsconsole.api.problems import ApiProblem
from opsconsole.api.request_bodies import RETRY_AFTER, field_refused
from opsconsole.api.tokens import READ, reveals

router = Router(tags=["operations"])

ListState = StrEnum(  # type: ignore[misc]  # the states are data: mypy cannot follow a functional enum
    "ListState",
    {name: name for name in ["attention", "any", work_lists.HELD, *[state.value for state in State]]},
)
PAGE_LIMIT = 100


class ListQuery(Schema):
    state: ListState = Field(
        ListState("attention"),
        description="`attention` (default): every state that needs attention, as the console's queue; "
        "`held`: what a pause holds; `any`: every state; or one state.",
    )
    action: str | None = Field(None, max_length=100, description="One action's operations.")
    destination: str | None = Field(None, max_length=100, description="The operations of every action calling it.")
    age: Literal["1h", "24h", "7d"] | None = Field(None, description="Arrived longer ago than this.")
    q: str | None = Field(
        None, max_length=200, description="A key's start, part of a request id, or a destination's record id."
    )
    cursor: str | None = Field(None, max_length=100, description="`next_cursor` of the page before.")
    limit: int = Field(50, ge=1, le=PAGE_LIMIT)


@router.get(
    "/operations",
    auth=READ,
    openapi_extra=RETRY_AFTER,
    response={200: OperationPage, **READ_REFUSED, 422: InputRefused},
    summary="The workspace's operations, the console queue's filters, a page at a time (newest change first)",
)
def list_operations(request, filters: Query[ListQuery]):
    """Read along the list's index, `limit` (at most 100) at a time, never counted: the states
    that need attention (and `held`) newest change first, as the queue sorts them; `any` and the
    finished states newest arrival first. Pass `next_cursor` as `cursor` for the next page."""
    if unknown := sorted(set(request.GET) - set(ListQuery.model_fields)):
        # A misspelt filter would otherwise list everything as if it were not there.
        raise field_refused(unknown[0], "is not a filter of this list")
    operations, by_change = _chosen(request, filters)
    if filters.cursor and (keyset.Cursor if by_change else keyset.IdCursor).parse(filters.cursor) is None:
        raise field_refused("cursor", "is not a cursor of this list: pass next_cursor as it came")
    page = keyset.paginate(
        operations.select_related("workspace", "assigned_to"),
        {"older": filters.cursor} if filters.cursor else {},
        field="updated_at" if by_change else "pk",
        size=filters.limit,
    )
    reveal = reveals(request)
    body = OperationPage(
        operations=[operate_answers.operation_item(operation, reveal=reveal) for operation in page],
        next_cursor=str(page.older) if page.older is not None else None,
    )
    return answers.respond(body, 200)


def _chosen(request, filters: ListQuery) -> tuple[QuerySet, bool]:
    """The operations the filters choose, in the token's workspace, and whether the list is read by
    change (the queue's order, along its indexes) rather than by arrival."""
    for name in ("action", "destination", "q"):
        value = getattr(filters, name)
        if value is not None and (problem := decoding.storable_text_problem(value)):
            raise field_refused(name, problem)
    state = str(filters.state)
    if state in ("attention", work_lists.HELD) or state in ATTENTION_STATES:
        # Only `held` lists by the pause switches: the attention states need no query for them.
        switches = list(Control.objects.filter(paused=True)) if state == work_lists.HELD else []
        queue = work_lists.queue_states(switches)
        operations, by_change = queue[work_lists.ATTENTION if state == "attention" else state], True
    else:
        operations = Operation.objects.all() if state == "any" else Operation.objects.filter(state=state)
        by_change = False
    operations = operations.filter(workspace=request.workspace)
    if filters.action is not None:
        if filters.action not in registry:
            raise field_refused("action", "names no action")
        operations = operations.filter(action=filters.action)
    if filters.destination is not None:
        if filters.destination not in work_lists.actions_by_destination():
            raise field_refused("destination", "names no destination an action calls")
        operations = operations.filter(work_lists.for_destination(filters.destination))
    if filters.age is not None:
        operations = operations.filter(work_lists.older_than(filters.age))
    if filters.q and filters.q.strip():
        operations = operations.filter(work_lists.key_or_request_id(filters.q.strip()))
    return operations, by_change


@router.get(
    "/operations/{path:key}",
    auth=READ,
    openapi_extra=RETRY_AFTER,
    response={200: OperationDetail, **READ_REFUSED, 404: answers.NotFound},
    summary="One operation of this workspace, by key, with its attempts, deliveries, conflicts, decisions and audit",
)
def get_operation(request, key: str):
    operation = find_operation(request, key)
    person = request.person
    body = operate_answers.operation_detail(
        operation,
        reveal=reveals(request),
        sees_every_answer=person is not None and privacy.sees_every_answer(person),
    )
    return answers.respond(body, 200)


def find_operation(request, key: str) -> Operation:
    """The operation of the token's workspace with ``key``, else 404."""
    # A key the database cannot hold (NUL, a lone surrogate) names no operation: not even asked.
    operation = (
        None
        if decoding.storable_text_problem(key)
        else Operation.objects.select_related("workspace", "assigned_to")
        .filter(workspace=request.workspace, key=key)
        .first()
    )
    if operation is None:
        raise ApiProblem(404, answer=answers.NO_SUCH_OPERATION)
    return operation
