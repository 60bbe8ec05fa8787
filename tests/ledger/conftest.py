"""Test-only action types and a scripted destination: the one boundary where a fake is allowed."""

import itertools
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from ledger.actions import base
from ledger.actions.base import ActionDefinition
from ledger.intake.submit import submit_event
from ledger.models import Operation
from ledger.outcomes import Success
from ledger.states import State


class ScriptedData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: StrictStr
    version: StrictInt


class Destination:
    """The far side of a test action: each call takes the next scripted reply.

    A reply is a ``Success``, an exception (raised, as the destination's client would), or a
    callable taking the operation (to let time pass or a sweep run while the call is in flight).
    With no reply left, the call succeeds.
    """

    def __init__(self):
        self.replies = []
        self.calls = []

    def answer(self, *replies):
        self.replies.extend(replies)

    def __call__(self, operation):
        self.calls.append((operation.key, operation.fencing_token))
        reply = self.replies.pop(0) if self.replies else Success(result={"sent": True})
        if callable(reply):
            reply = reply(operation)
        if isinstance(reply, BaseException):
            raise reply
        return reply


class ScriptedAction(ActionDefinition):
    schema = ScriptedData
    identity_fields = ("request_id", "version")
    fingerprint_fields = ("request_id", "version")
    destination: Destination

    def perform(self, operation):
        return self.destination(operation)


START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


@pytest.fixture
def frozen(time_machine):
    """Time stands still at START until the test moves it."""
    time_machine.move_to(START, tick=False)
    return time_machine


_names = itertools.count(1)


@pytest.fixture
def scripted_action():
    """Register test-only action types (``scripted_action(external=True, ...)``); removed afterwards."""
    registered = []

    def make(**declared):
        name = declared.pop("name", None) or f"test-scripted-{next(_names)}"
        cls = type("TestScriptedAction", (ScriptedAction,), {"name": name, **declared})
        base.register(cls)
        registered.append(name)
        action = base.registry[name]
        action.destination = Destination()
        return action

    yield make
    for name in registered:
        base.registry.coded.pop(name, None)


def submit(workspace, action: str, request_id: str = "R-1", version: int = 1) -> Operation:
    """Reserve one operation through intake, as an automation would."""
    result = submit_event(
        workspace=workspace,
        source="api",
        raw={"action": action, "data": {"request_id": request_id, "version": version}},
    )
    assert result.outcome == "accepted", result
    return result.operation


def submit_brief(workspace, request_id: str = "R-42", version: int = 3) -> Operation:
    data = {"request_id": request_id, "version": version, "title": "Review renewal options", "owner": "ops"}
    result = submit_event(workspace=workspace, source="api", raw={"action": "prepare-brief", "data": data})
    assert result.outcome == "accepted", result
    return result.operation


def succeeded_briefs(workspace, keys, *, batch_size: int | None = None) -> None:
    """Succeeded prepare-brief operations with these keys, written in bulk (no delivery, attempt or
    audit event): many finished rows, as a long-running ledger holds them."""
    template = submit_brief(workspace, request_id="TEMPLATE")
    fields = ("action", "fingerprint", "payload", "definition_version", "key_recipe")
    same = {name: getattr(template, name) for name in fields}
    rows = [Operation(workspace=workspace, key=key, state=State.SUCCEEDED, **same) for key in keys]
    Operation.objects.bulk_create(rows, batch_size=batch_size)


class NoteData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: StrictStr
    version: StrictInt
    note: StrictStr


class Recorder:
    """The destination: records the note of every payload it is asked to act on."""

    def __init__(self):
        self.notes = []

    def __call__(self, operation):
        self.notes.append(operation.payload["note"])
        return Success(result={"sent": operation.payload["note"]})


@pytest.fixture
def noted(scripted_action):
    """Make a test action whose payload has a note in its fingerprint; its destination records notes."""

    def make(**declared):
        action = scripted_action(schema=NoteData, fingerprint_fields=("request_id", "version", "note"), **declared)
        action.destination = Recorder()
        return action

    return make
