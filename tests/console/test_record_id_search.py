"""The queue's and the audit trail's search boxes also find an operation by the record id its
destination gave it (besides its key and request id), exactly, within the person's workspaces."""

from ledger.core import accounts
from ledger.models import AuditEvent
from ledger.people import resolutions


def keys_on(response) -> set[str]:
    return {op.key for op in response.context["page"].object_list}


def test_the_queue_finds_an_operation_by_its_destination_record_id(client, login, make_operation):
    login("viewer")
    found = make_operation("needs_review", request_id="R-1", external_id="rec-5001")
    make_operation("needs_review", request_id="R-2", external_id="rec-50010")

    assert keys_on(client.get("/console/", {"q": "rec-5001"})) == {found.key}
    assert keys_on(client.get("/console/", {"q": "rec-500"})) == set()  # the whole id, not a part
    assert 'placeholder="or destination record id"' in client.get("/console/").content.decode()


def test_the_audit_search_finds_the_events_of_an_operation_by_its_record_id(client, login, person, unknown_notice):
    operator = person("resolver", "operator")
    resolutions.resolve_operation(
        unknown_notice, user=operator, external_id="rec-by-hand-1", reason="found it in the vendor portal"
    )
    login("viewer")

    response = client.get("/console/audit/", {"key": "rec-by-hand-1"})

    events = response.context["page"].object_list
    assert {event.operation_id for event in events} == {unknown_notice.pk}
    assert len(events) == AuditEvent.objects.filter(operation=unknown_notice).count() > 1
    assert client.get("/console/audit/", {"key": "rec-by-hand"}).context["page"].object_list == []


def test_neither_finds_another_workspaces_record_id(client, make_operation, person):
    make_operation("needs_review", external_id="rec-theirs")  # in "demo"
    accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")
    client.force_login(person("outsider", "admin", workspaces=["other"]))

    assert keys_on(client.get("/console/", {"q": "rec-theirs"})) == set()
    assert client.get("/console/audit/", {"key": "rec-theirs"}).context["page"].object_list == []
