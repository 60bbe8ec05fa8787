"""Pauses over the API: list the switches that hold the workspace's work, pull one (the whole
workspace, one action in it, or every action calling one destination) and release one, through
``ledger.people.pause`` as the console's controls page does. A person's token needs the pause
role (operator, admin); a machine's, the ``operate`` scope alone (a flow pausing a vendor on an
incident). A switch beyond the workspace (global, an action everywhere) is a superuser's."""

from typing import Literal

from django.db import transaction
from django.db.models import Q
from ninja import Router
from pydantic import BaseModel, ConfigDict, Field

from ledger.actions import registry
from ledger.core import roles
from ledger.models import Control
from ledger.people.pause import NotPaused, set_paused
from ledger.reads import work_lists
from opsconsole.api import answers
from opsconsole.api.operate_answers import (
    ACTING_REFUSED,
    BODY_REFUSED,
    NO_SUCH_PAUSE,
    READ_REFUSED,
    Pauses,
    Resumed,
    forbidden,
    pause_answer,
)
from opsconsole.api.problems import ApiProblem
from opsconsole.api.request_bodies import RETRY_AFTER, field_refused, json_body, read_body
from opsconsole.api.tokens import OPERATE, READ, actor_of

router = Router(tags=["pauses"])


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: Literal["workspace", "action", "destination"] = Field(
        description="`workspace`: all its work; `action`: one action's (name it in `action`); `destination`: "
        "every action calling it (name it in `destination`), one pause per action."
    )
    action: str | None = Field(None, max_length=100)
    destination: str | None = Field(None, max_length=100)
    reason: str = Field(max_length=500, pattern=r"\S", description="Why (required), shown on the controls page.")


def _may_pause(request, workspace_id: int | None) -> None:
    """A person needs the pause role there; a machine's token with ``operate`` pauses its own
    workspace's work as its operator (``roles.Machine``), never beyond it."""
    actor = actor_of(request)
    if roles.can(actor, roles.PAUSE, workspace_id):
        return
    if workspace_id is None:
        raise ApiProblem(
            403,
            answer=forbidden(
                "beyond_workspace",
                "This switch holds every workspace's work: only a superuser may release it (the console's controls).",
            ),
        )
    raise ApiProblem(403, answer=forbidden("role", roles.refusal(actor, roles.PAUSE, request.workspace)))


def _holding(request):
    return Control.objects.select_related("workspace").filter(
        Q(workspace__isnull=True) | Q(workspace=request.workspace), paused=True
    )


@router.get(
    "/pauses",
    auth=READ,
    openapi_extra=RETRY_AFTER,
    response={200: Pauses, **READ_REFUSED},
    summary="The pulled pause switches that hold this workspace's work",
)
def list_pauses(request):
    pauses = [pause_answer(control) for control in _holding(request).order_by("id")]
    return answers.respond(Pauses(pauses=pauses), 200)


@router.post(
    "/pauses",
    auth=OPERATE,
    response={201: Pauses, **READ_REFUSED, 403: ACTING_REFUSED[403], **BODY_REFUSED},
    openapi_extra=json_body(PauseBody),
    summary="Pause this workspace, one action in it, or every action calling a destination",
)
def pause(request):
    """Held operations keep their state; workers do not claim them and their deadlines wait.
    Answers the switches pulled (a destination's: one per action calling it)."""
    body = read_body(request, PauseBody)
    actions = [""]
    if body.scope == "workspace" and (body.action or body.destination):
        raise field_refused("scope", "a workspace's pause names no action or destination")
    if body.scope == "action":
        if not body.action or body.action not in registry:
            raise field_refused("action", "must name an action")
        actions = [body.action]
    if body.scope == "destination":
        actions = work_lists.actions_by_destination().get(body.destination or "", [])
        if not actions:
            raise field_refused("destination", "must name a destination an action calls")
    _may_pause(request, request.workspace.pk)
    with transaction.atomic():
        pulled = [
            set_paused(
                paused=True, actor=request.submitter, reason=body.reason, workspace=request.workspace, action=action
            )
            for action in actions
        ]
    return answers.respond(Pauses(pauses=[pause_answer(control) for control in pulled]), 201)


@router.delete(
    "/pauses/{int:pause_id}",
    auth=OPERATE,
    openapi_extra=RETRY_AFTER,
    response={200: Resumed, **ACTING_REFUSED},
    summary="Release a pause switch: the work it held runs again (the time it held them is kept)",
)
def resume(request, pause_id: int):
    control = _holding(request).filter(pk=pause_id).first()
    if control is None:
        raise ApiProblem(404, answer=NO_SUCH_PAUSE)
    _may_pause(request, control.workspace_id)
    try:
        released = set_paused(paused=False, actor=request.submitter, workspace=control.workspace, action=control.action)
    except NotPaused:  # released by someone else since it was found: it holds nothing any more
        raise ApiProblem(404, answer=NO_SUCH_PAUSE) from None
    return answers.respond(Resumed(message=f"Resumed {released.scope_label}.", pause=pause_answer(released)), 200)
