"""Each decision over the API writes the audit events the console's writes: the same kinds, actor,
states and messages (the operation's own key, fingerprint and conflict id aside), because both call
the same service as the same person. Each is made twice from the same start, once in the console
and once over the API, and the events each wrote are compared."""

import pytest

from ledger.engine.processing import process_due_operations
from ledger.models import AuditEvent, Conflict, Operation
from tests.conftest import event, external_event

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


@pytest.fixture
def boss(person):
    """Who decides both ways: an admin (review and approve) who sent none of the operations."""
    return person("boss", "admin")


def _refund(machine, n):
    machine.post("/api/v1/events", {"action": "issue-refund", "data": REFUND | {"request_id": f"R-{n}"}})
    return Operation.objects.get(payload__request_id=f"R-{n}")


def _brief(machine, n):
    machine.post("/api/v1/events", event(f"d-{n}", request_id=f"B-{n}"))
    return Operation.objects.get(payload__request_id=f"B-{n}")


def _needs_review(machine, n, standin):
    standin.fail_next({"kind": "status", "status": 422})
    machine.post("/api/v1/events", external_event(delivery_id=f"d-{n}", request_id=f"N-{n}"))
    process_due_operations()
    return Operation.objects.get(payload__request_id=f"N-{n}")


def _unknown(machine, n, standin):
    standin.fail_next({"kind": "drop_after_commit"})
    machine.post("/api/v1/events", external_event(delivery_id=f"d-{n}", request_id=f"U-{n}"))
    process_due_operations()
    return Operation.objects.get(payload__request_id=f"U-{n}")


def _conflicted(machine, n):
    operation = _brief(machine, n)
    machine.post("/api/v1/events", event(f"d-{n}-again", request_id=f"B-{n}", title="Another title, same version"))
    return operation


# How each decision is made, from the console (a form POST) and over the API (path, body), from
# the operation the start made.
DECISIONS = {
    "approve": (
        _refund,
        lambda op: (f"/console/operations/{op.pk}/approve/", {"fingerprint": op.fingerprint, "note": "looks right"}),
        lambda op: (f"/api/v1/operations/{op.key}/approve", {"fingerprint": op.fingerprint, "reason": "looks right"}),
    ),
    "reject": (
        _refund,
        lambda op: (f"/console/operations/{op.pk}/reject/", {"fingerprint": op.fingerprint, "note": "duplicate"}),
        lambda op: (f"/api/v1/operations/{op.key}/reject", {"fingerprint": op.fingerprint, "reason": "duplicate"}),
    ),
    "replay": (
        _needs_review,
        lambda op: (f"/console/operations/{op.pk}/replay/", {"reason": "template fixed"}),
        lambda op: (f"/api/v1/operations/{op.key}/replay", {"reason": "template fixed"}),
    ),
    "resolve": (
        _unknown,
        lambda op: (f"/console/operations/{op.pk}/resolve/", {"external_id": "rec_1", "reason": "seen in the vendor"}),
        lambda op: (f"/api/v1/operations/{op.key}/resolve", {"external_id": "rec_1", "note": "seen in the vendor"}),
    ),
    "cancel": (
        _brief,
        lambda op: (f"/console/operations/{op.pk}/cancel/", {"reason": "not wanted"}),
        lambda op: (f"/api/v1/operations/{op.key}/cancel", {"reason": "not wanted"}),
    ),
    "take": (
        _brief,
        lambda op: (f"/console/operations/{op.pk}/take/", {}),
        lambda op: (f"/api/v1/operations/{op.key}/take", None),
    ),
    "apply conflict": (
        _conflicted,
        lambda op: (f"/console/conflicts/{op.conflicts.get().pk}/apply/", {"reason": "the new title is meant"}),
        lambda op: (f"/api/v1/conflicts/{op.conflicts.get().pk}/apply", {"reason": "the new title is meant"}),
    ),
    "dismiss conflict": (
        _conflicted,
        lambda op: (f"/console/conflicts/{op.conflicts.get().pk}/dismiss/", {"reason": "sent by mistake"}),
        lambda op: (f"/api/v1/conflicts/{op.conflicts.get().pk}/dismiss", {"reason": "sent by mistake"}),
    ),
}


def events_of(operation: Operation, after: int) -> list[tuple]:
    """The events written since ``after``, with what names this operation put in placeholders."""
    conflicts = {
        str(pk): "{conflict}" for pk in Conflict.objects.filter(operation=operation).values_list("pk", flat=True)
    }

    def plain(message: str) -> str:
        message = message.replace(operation.key, "{key}")
        for fingerprint in {
            operation.fingerprint,
            *Conflict.objects.filter(operation=operation).values_list("incoming_fingerprint", flat=True),
        }:
            message = message.replace(fingerprint, "{fingerprint}")
        for pk, name in conflicts.items():
            message = message.replace(f"conflict {pk}", f"conflict {name}")
        return message

    return [
        (e.kind, e.actor, e.from_state, e.to_state, e.error_category, plain(e.message))
        for e in AuditEvent.objects.filter(id__gt=after).order_by("id")
    ]


def last_event_id() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


@pytest.mark.parametrize("decision", DECISIONS)
def test_the_api_writes_the_audit_events_the_console_writes(decision, client, caller, boss, standin, workspace):
    start, in_console, over_api = DECISIONS[decision]
    machine = caller()
    needs_standin = start in (_needs_review, _unknown)
    first = start(machine, 1, standin) if needs_standin else start(machine, 1)
    second = start(machine, 2, standin) if needs_standin else start(machine, 2)

    flow = caller("boss")
    client.force_login(boss)
    before = last_event_id()
    url, form = in_console(first)
    assert client.post(url, form).status_code == 302
    console = events_of(first, before)

    before = last_event_id()
    path, body = over_api(second)
    response = flow.post(path, body)
    assert response.status_code == 200, response.content
    api = events_of(second, before)

    assert console, "the console's decision wrote no audit event"
    assert api == console


def test_pausing_and_resuming_over_the_api_writes_what_the_console_writes(client, caller, boss, workspace):
    flow = caller("boss")
    client.force_login(boss)
    before = last_event_id()
    client.post("/console/controls/pause/", {"workspace": workspace.pk, "action": "", "reason": "vendor incident"})
    client.post("/console/controls/resume/", {"workspace": workspace.pk, "action": ""})
    console = [(e.kind, e.actor, e.workspace_id) for e in AuditEvent.objects.filter(id__gt=before).order_by("id")]

    before = last_event_id()
    pulled = flow.post("/api/v1/pauses", {"scope": "workspace", "reason": "vendor incident"}).json()["pauses"][0]
    assert flow.delete(f"/api/v1/pauses/{pulled['id']}").status_code == 200
    api = [(e.kind, e.actor, e.workspace_id) for e in AuditEvent.objects.filter(id__gt=before).order_by("id")]

    assert console == [("paused", "boss", workspace.pk), ("resumed", "boss", workspace.pk)]
    assert api == console
    messages = list(AuditEvent.objects.filter(kind="paused").values_list("message", flat=True))
    assert messages == ["workspace demo: vendor incident"] * 2
