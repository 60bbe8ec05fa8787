"""A destination's credential never reaches the people who see its answers.

Destinations serve every workspace: their credential is a superuser's. A careless vendor (the real
stand-in's ``echo_credential`` fault) quotes it back in every common form, to a try made by a
worker's drain and to a reconciler's lookup. The stored rows hold none of those forms, and the
operation page shows a viewer of another workspace that uses the destination the answer masked.
"""

import base64
import html

from django.contrib.auth.models import Permission
from django.urls import reverse

from ledger.core import privacy
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, Membership, Operation
from reconciliation.reconcile import reconcile_operation
from reconciliation.two_way_audit import run_audit
from tests.echoing_vendor import SECRET, filed, leaks


def stored_text(operation: Operation) -> str:
    """Everything stored about ``operation`` that a destination's words may reach."""
    operation.refresh_from_db()
    attempts = Attempt.objects.filter(operation=operation)
    texts = [operation.last_error_message, str(operation.result)]
    for attempt in attempts:
        texts += [attempt.error_message, attempt.error_code, attempt.response_body]
        texts += [f"{name}: {value}" for name, value in attempt.response_headers.items()]
    texts += AuditEvent.objects.filter(operation=operation).values_list("message", flat=True)
    return "\n".join(texts)


def test_a_refusal_that_echoes_the_credential_is_stored_with_no_form_of_it(workspace, second_workspace, echoing_vendor):
    """The worker's drain meets a 401 quoting the key in every form; the attempt row, the
    operation's last error and its audit trail keep none of them, and still say what happened."""
    echoing_vendor.fail_next({"kind": "echo_credential", "status": 401})
    operation = filed(second_workspace, "R-1")

    process_due_operations(worker="w1")

    stored = stored_text(operation)
    assert operation.state == "needs_review"
    assert leaks(stored) == [], stored
    attempt = Attempt.objects.get(operation=operation)
    assert (attempt.http_status, attempt.error_code) == (401, "invalid_api_key")
    assert f"Invalid API key provided: {privacy.MASK}" in attempt.error_message
    assert attempt.response_headers["x-request-id"] == f"req_{privacy.MASK}"


def test_a_lookup_that_echoes_the_credential_is_stored_with_no_form_of_it(workspace, second_workspace, echoing_vendor):
    """The reconciler's lookup meets the same vendor: its reason, stored as the last error and in
    the audit trail, keeps no form of the key."""
    echoing_vendor.fail_next({"kind": "drop_after_commit"})
    operation = filed(second_workspace, "R-2")
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "unknown"
    echoing_vendor.fail_next_lookup({"kind": "echo_credential", "status": 401})

    verdict = reconcile_operation(operation)

    stored = stored_text(operation)
    assert verdict in ("cannot_tell", "gave_up")
    assert leaks(stored) == [], stored
    assert f"Invalid API key provided: {privacy.MASK}" in stored


def test_an_audit_run_failed_by_a_listing_that_echoes_the_credential_keeps_no_form_of_it(echoing_vendor, time_machine):
    """The reconciliation audit lists the destination's records; its refusal fails the run, whose
    error is kept and shown: masked like an answer."""
    echoing_vendor.fail_next_lookup({"kind": "echo_credential", "status": 401})

    run = run_audit()

    assert run.status == "failed"
    assert leaks(run.error) == [], run.error
    assert f"Invalid API key provided: {privacy.MASK}" in run.error


def test_a_viewer_of_another_workspace_sees_the_answer_masked(
    client, django_user_model, workspace, second_workspace, echoing_vendor
):
    """Both workspaces call the destination; a viewer of the other one opens their operation's
    page: what the vendor said is there, readable, with no form of the destination's key."""
    echoing_vendor.fail_next({"kind": "echo_credential", "status": 401}, {"kind": "echo_credential", "status": 401})
    filed(workspace, "R-3")
    theirs = filed(second_workspace, "R-3")
    process_due_operations(worker="w1")
    viewer = django_user_model.objects.create_user(username="vic", password="pw")
    Membership.objects.create(user=viewer, workspace=second_workspace, role="viewer")
    client.force_login(viewer)

    page = client.get(reverse("console:operation", args=[theirs.pk]))

    assert page.status_code == 200
    text = page.content.decode()
    assert leaks(text) == []
    assert "What the destination said: HTTP 401" in text
    said = f"Invalid API key provided: {privacy.MASK}; as sent: Basic YXBpOnNr{privacy.MASK}"
    assert html.escape(f'"detail": "{said}"', quote=True) in text
    assert html.escape(f'"bearer": "Bearer {privacy.MASK}"', quote=True) in text
    assert html.escape(f'"groups": "{privacy.MASK}"', quote=True) in text  # the key in groups of 4


def test_a_form_masking_does_not_know_is_blanked_for_all_but_superusers(
    client, django_user_model, workspace, second_workspace, echoing_vendor
):
    """The stand-in also echoes the key's base64 reversed, which masking does not know: stored as it
    came, shown in full to a superuser (who configures the destination), and blanked with every long
    opaque string for everyone else, a workspace admin too (``privacy.answer_shown_to``), who read
    that it was."""
    echoing_vendor.fail_next({"kind": "echo_credential", "status": 401})
    theirs = filed(second_workspace, "R-6")
    process_due_operations(worker="w1")
    reversed_base64 = base64.b64encode(SECRET.encode()).decode()[::-1]
    assert reversed_base64 in Attempt.objects.get(operation=theirs).response_body
    admin = django_user_model.objects.create_user(username="ada", password="pw")
    Membership.objects.create(user=admin, workspace=second_workspace, role="admin")
    superuser = django_user_model.objects.create_user(username="sue", password="pw", is_superuser=True)
    path = reverse("console:operation", args=[theirs.pk])

    client.force_login(admin)
    theirs_seen = client.get(path).content.decode()
    client.force_login(superuser)
    superusers_seen = client.get(path).content.decode()

    assert html.escape(f'"reversed_base64": "{privacy.MASK}"', quote=True) in theirs_seen
    assert reversed_base64 not in html.unescape(theirs_seen)
    assert "Long opaque strings" in theirs_seen
    assert html.escape(f'"reversed_base64": "{reversed_base64}"', quote=True) in superusers_seen
    assert "Long opaque strings" not in superusers_seen
    assert html.escape('"error": "invalid_api_key"', quote=True) in theirs_seen  # words are kept


def test_an_answer_kept_before_masking_after_decoding_is_shown_only_to_superusers(
    client, django_user_model, workspace, echoing_vendor
):
    """Answers stored before this masking were masked for the literal credential only: a form of it
    may hide in their bodies and headers, so only superusers, who configure destinations, see them."""
    echoing_vendor.fail_next({"kind": "status", "status": 400, "error": "owner_unknown", "detail": "no owner ops-9"})
    operation = filed(workspace, "R-4")
    process_due_operations(worker="w1")
    Attempt.objects.filter(operation=operation).update(answer_masked_decoded=False)  # as the migration leaves them
    people = {
        role: django_user_model.objects.create_user(username=role, password="pw", is_superuser=role == "superuser")
        for role in ("viewer", "operator", "approver", "admin", "superuser")
    }
    for role, person in people.items():
        if role != "superuser":
            Membership.objects.create(user=person, workspace=workspace, role=role)

    pages = {}
    for role, person in people.items():
        client.force_login(person)
        pages[role] = client.get(reverse("console:operation", args=[operation.pk])).content.decode()

    for role in ("viewer", "operator", "approver", "admin"):
        assert "no owner ops-9" in pages[role]  # the message, as it was kept
        assert "answer-body" not in pages[role], role
        assert "answer-headers" not in pages[role], role
        assert "shown only to superusers" in pages[role]
    assert "answer-body" in pages["superuser"]
    assert "shown only to superusers" not in pages["superuser"]


def test_the_admin_shows_answers_as_the_operation_page_does(client, django_user_model, workspace, echoing_vendor):
    detail = "no owner ops-9 (trace tr_9fK2mQ7xL4pR8sV1wZ)"
    echoing_vendor.fail_next({"kind": "status", "status": 400, "error": "owner_unknown", "detail": detail})
    operation = filed(workspace, "R-5")
    process_due_operations(worker="w1")
    staff = django_user_model.objects.create_user(username="sam", password="pw", is_staff=True)
    Membership.objects.create(user=staff, workspace=workspace, role="admin")
    staff.user_permissions.add(Permission.objects.get(codename="view_attempt"))  # the admin's inline asks for it
    superuser = django_user_model.objects.create_user(username="sue", password="pw", is_staff=True, is_superuser=True)
    path = f"/admin/ledger/operation/{operation.pk}/change/"
    body = html.escape(f'"detail": "{detail}"', quote=True)
    blanked = html.escape(f'"detail": "no owner ops-9 (trace {privacy.MASK})"', quote=True)

    def seen_by(person) -> str:
        client.force_login(person)
        page = client.get(path)
        assert page.status_code == 200
        return page.content.decode()

    assert body in seen_by(superuser)
    assert blanked in seen_by(staff)  # shown to everyone who sees the operation, long opaque strings blanked
    assert "long opaque strings blanked" in seen_by(staff)
    Attempt.objects.filter(operation=operation).update(answer_masked_decoded=False)
    assert blanked not in seen_by(staff)
    assert "shown only to superusers" in seen_by(staff)
    assert body in seen_by(superuser)
