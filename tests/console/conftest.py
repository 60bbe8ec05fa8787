"""Console fixtures: people with different permissions, and operations put where a test needs them."""

import pytest
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from ledger.intake.submit import submit_event
from ledger.models import Membership, Operation
from ledger.outcomes import PermanentError
from tests.echoing_vendor import echoing_vendor, second_workspace  # noqa: F401  fixtures
from tests.ledger.conftest import scripted_action, submit  # noqa: F401


@pytest.fixture
def login(client, django_user_model, workspace):
    """Log the test client in as a member of the demo workspace with the named role ("viewer",
    "operator", "approver", "admin"), or as "nobody", who belongs to no workspace."""

    def as_(role: str):
        user = django_user_model.objects.create_user(username=role, password="pw")
        if role != "nobody":
            Membership.objects.create(user=user, workspace=workspace, role=role)
        client.force_login(user)
        return user

    return as_


@pytest.fixture
def action(scripted_action):  # noqa: F811
    """A test action type (removed from the registry afterwards)."""
    return scripted_action()


@pytest.fixture
def make_operation(workspace, action):
    """Reserve an operation through intake, then (test setup only) put it in ``state`` directly."""

    def make(state: str = "pending", request_id: str = "R-1", **fields) -> Operation:
        operation = submit(workspace, action.name, request_id=request_id)
        if state != "pending" or fields:
            Operation.objects.filter(pk=operation.pk).update(state=state, **fields)
            operation.refresh_from_db()
        return operation

    return make


@pytest.fixture
def needing_review(workspace, action):
    """An operation that reached needs_review the real way: its destination refused it permanently."""
    # Imported here: importing ledger.processing before ledger.tasks is a circular import.
    from ledger.engine.processing import process_due_operations

    action.destination.answer(PermanentError("owner does not exist"))
    operation = submit(workspace, action.name, request_id="R-7")
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    return operation


class NotedData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: StrictStr
    version: StrictInt
    note: StrictStr
    secret: StrictStr


@pytest.fixture
def noted_action(scripted_action):  # noqa: F811
    """A test action with a business field (note) and a sensitive one (secret)."""
    return scripted_action(
        schema=NotedData, fingerprint_fields=("request_id", "version", "note", "secret"), sensitive_fields=("secret",)
    )


@pytest.fixture
def noted(workspace, noted_action):
    """Submit a ``noted_action`` event; returns the intake result."""

    def send(note="first", secret="s3cr3t-one", request_id="R-9", **extra):
        data = {"request_id": request_id, "version": 1, "note": note, "secret": secret}
        return submit_event(workspace=workspace, source="api", raw={"action": noted_action.name, "data": data}, **extra)

    return send


@pytest.fixture(autouse=True)
def configured_read_once(monkeypatch, db):
    """The registry reads the configured actions again every 2 s (``configured.Loaded``); on a busy
    machine such a read lands inside a measured request now and then. Read them now, and not
    again during the test unless they change (a save in this process makes the next look read
    them), so a query bound counts the page's own queries only."""
    import math

    from ledger.actions import registry
    from ledger.integrations import configured

    monkeypatch.setattr(configured.Loaded, "REFRESH_SECONDS", math.inf)
    configured.loaded.forget()
    list(registry)
