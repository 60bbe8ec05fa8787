"""How the operation page reads to a person: money with its currency, an approve confirmation that
repeats what is approved, who can act when this person cannot, what each way out of unknown does,
errors that do not repeat their category, attempts numbered across a replay, styled error pages
(DEBUG off) and a favicon."""

import html
import re

import pytest
from django.conf import settings
from django.contrib.messages import get_messages
from django.contrib.staticfiles import finders
from django.test import Client

from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.models import Approval, Attempt, Operation
from opsconsole.console.money import format_money
from tests.ledger.conftest import submit

MASK = "••••"
REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 2500, "currency": "EUR"}


def refund(workspace, person=None, **data) -> Operation:
    result = submit_event(
        workspace=workspace, source="api", person=person, raw={"action": "issue-refund", "data": REFUND | data}
    )
    assert result.outcome == "accepted", result
    return result.operation


def page_of(client, operation, suffix="") -> str:
    response = client.get(f"/console/operations/{operation.pk}/{suffix}")
    assert response.status_code == 200
    return html.unescape(re.sub(r"\s+", " ", response.content.decode()))


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


# --- money ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (2500, "EUR", "25.00 EUR"),
        (5, "USD", "0.05 USD"),
        (123456789, "EUR", "1,234,567.89 EUR"),
        (2500, "JPY", "2,500 JPY"),
        (2500, "KWD", "2.500 KWD"),
        (-150, "GBP", "-1.50 GBP"),
    ],
)
def test_it_writes_an_amount_in_its_currencys_minor_units(amount, currency, shown):
    assert format_money(amount, currency) == shown


@pytest.mark.parametrize(
    ("amount", "currency"),
    [
        (MASK, "EUR"),
        ("[redacted]", "EUR"),
        (True, "EUR"),
        (25.0, "EUR"),
        (2500, None),
        (2500, MASK),
        (2500, "eur"),
    ],
)
def test_it_leaves_what_is_no_amount_as_it_is(amount, currency):
    assert format_money(amount, currency) is None


def test_it_shows_a_refunds_amount_with_its_currency_to_an_approver(client, login, workspace):
    login("approver")

    page = page_of(client, refund(workspace))

    assert "<dt>Amount</dt><dd>25.00 EUR</dd>" in page
    assert "<dd>2500</dd>" not in page
    assert "<dt>Customer</dt><dd>C-1001</dd>" in page


def test_it_shows_a_yen_amount_without_decimals(client, login, workspace):
    login("approver")

    assert "<dt>Amount</dt><dd>2,500 JPY</dd>" in page_of(client, refund(workspace, currency="JPY"))


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_a_masked_amount_stays_masked(client, login, workspace, role):
    login(role)
    operation = refund(workspace)
    assert (
        submit_event(
            workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND | {"amount_cents": 3000}}
        ).outcome
        == "conflict"
    )

    page = page_of(client, operation)

    assert f"<dt>Amount</dt><dd>{MASK}</dd>" in page
    assert "25.00" not in page
    assert "30.00" not in page
    assert "2500" not in page
    assert "3000" not in page
    assert (
        f'<strong>Amount</strong>: <span class="recorded">{MASK}</span> → <span class="incoming">{MASK}</span>'
    ) in page


def test_it_shows_both_amounts_of_a_conflict_with_their_currencies(client, login, workspace):
    login("approver")
    operation = refund(workspace)
    submit_event(
        workspace=workspace,
        source="api",
        raw={"action": "issue-refund", "data": REFUND | {"amount_cents": 3000, "currency": "JPY"}},
    )

    page = page_of(client, operation)

    assert (
        '<strong>Amount</strong>: <span class="recorded">25.00 EUR</span> → <span class="incoming">3,000 JPY</span>'
    ) in page


# --- the approve confirmation ----------------------------------------------------------------------


def test_the_approve_button_leads_to_the_confirmation(client, login, workspace):
    login("approver")
    operation = refund(workspace)

    page = page_of(client, operation)

    assert f'<a class="button" href="/console/operations/{operation.pk}/approve/"' in page
    assert ">Reject</button>" in page


def test_the_confirmation_repeats_what_is_approved(client, login, workspace, person):
    login("approver")
    sender = person("sender", "operator")
    operation = refund(workspace, person=sender)

    page = page_of(client, operation, "approve/")

    assert f"<h1>Approve {operation.key}?</h1>" in page
    for term, value in [
        ("Action", "issue-refund"),
        ("Key", operation.key),
        ("Workspace", "demo"),
        ("Amount", "25.00 EUR"),
        ("Customer", "C-1001"),
        ("Submitted by", "sender (submitted)"),
        ("Payload fingerprint", f"<code>{operation.fingerprint}</code>"),
    ]:
        assert f"<dt>{term}</dt><dd>{value}</dd>" in page, term
    assert f'name="fingerprint" value="{operation.fingerprint}"' in page
    assert ">Confirm</button>" in page
    assert f'href="/console/operations/{operation.pk}/">Back</a>' in page
    operation.refresh_from_db()
    assert operation.state == "pending_approval"
    assert not Approval.objects.exists()


def test_confirming_approves_the_payload_shown(client, login, workspace):
    login("approver")
    operation = refund(workspace)
    shown = re.search(r'name="fingerprint" value="(\w+)"', page_of(client, operation, "approve/")).group(1)

    response = client.post(f"/console/operations/{operation.pk}/approve/", {"fingerprint": shown, "note": "ok"})

    # Nothing else awaits: the approver lands on the work list, not back on the same operation.
    assert response.url == "/console/approvals/"
    assert messages_of(response) == [("success", f"Approved {operation.key}. Nothing else awaits your approval.")]
    operation.refresh_from_db()
    assert operation.state == "pending"
    assert Approval.objects.get().fingerprint == shown


@pytest.mark.parametrize("sent", [{}, {"fingerprint": ""}, {"fingerprint": "0" * 64}])
def test_it_refuses_an_approval_without_the_pages_fingerprint(client, login, workspace, sent):
    login("approver")
    operation = refund(workspace)

    response = client.post(f"/console/operations/{operation.pk}/approve/", {"note": ""} | sent)

    [(level, message)] = messages_of(response)
    assert level == "error"
    assert message in (
        "Payload fingerprint is required; nothing was changed.",
        f"The payload of {operation.key} changed since it was shown; look at it again.",
    )
    operation.refresh_from_db()
    assert operation.state == "pending_approval"
    assert not Approval.objects.exists()


def test_the_confirmation_sends_back_what_cannot_be_approved(client, login, workspace, person):
    approver = login("approver")
    decided = refund(workspace, request_id="R-1")
    Operation.objects.filter(pk=decided.pk).update(state="pending")
    own = refund(workspace, person=approver, request_id="R-2")

    gone = client.get(f"/console/operations/{decided.pk}/approve/")
    assert gone.url == f"/console/operations/{decided.pk}/"
    assert messages_of(gone) == [
        ("error", f"{decided.key} is pending; only an operation awaiting approval can be approved.")
    ]
    client.get(gone.url)  # shows (and so spends) the message

    mine = client.get(f"/console/operations/{own.pk}/approve/")
    assert mine.url == f"/console/operations/{own.pk}/"
    assert messages_of(mine) == [
        ("error", f"You submitted {own.key}, so another approver must approve it (four eyes).")
    ]


def test_the_confirmation_is_an_approvers(client, login, workspace):
    login("operator")
    operation = refund(workspace)

    response = client.get(f"/console/operations/{operation.pk}/approve/")

    assert response.status_code == 403
    assert "operator may not approve or reject in workspace demo." in response.content.decode()


# --- who can act -----------------------------------------------------------------------------------


def test_an_operator_is_told_an_approver_must_sign_off(client, login, workspace, person):
    login("operator")
    person("carol", "approver")
    person("boss", "admin")
    person("watcher", "viewer")
    operation = refund(workspace)

    page = page_of(client, operation)

    assert (
        "An approver of workspace demo must sign off on this payload before it runs "
        "(approvers and admins: boss, carol)."
    ) in page
    assert ">Approve</a>" not in page
    assert ">Reject</button>" not in page


def test_the_approvers_named_leave_out_those_who_submitted_it(client, login, workspace, person):
    login("operator")
    carol = person("carol", "approver")

    page = page_of(client, refund(workspace, person=carol))

    assert (
        "An approver of workspace demo must sign off on this payload before it runs (there is none yet: "
        "a member needs the approver or admin role; a superuser may too)."
    ) in page


def test_a_viewer_is_told_operators_can_replay_or_cancel(client, login, needing_review, person):
    login("viewer")
    person("olga", "operator")

    page = page_of(client, needing_review)

    assert (
        "You are a viewer of workspace demo; an operator or admin of workspace demo can replay it or cancel "
        "it (operators and admins: olga)."
    ) in page
    assert ">Replay</button>" not in page
    assert ">Cancel</button>" not in page


def test_an_approver_is_told_of_four_eyes_on_their_own_work(client, login, workspace, person):
    approver = login("approver")
    person("dora", "approver")

    page = page_of(client, refund(workspace, person=approver))

    assert (
        "You submitted this operation, so another approver must approve or reject it (four eyes; approvers and "
        "admins: dora)."
    ) in page
    assert ">Approve</a>" not in page
    assert ">Reject</button>" not in page


def test_an_operator_who_replayed_is_told_they_could_not_approve(client, login, workspace, person):
    operator = login("operator")
    operation = refund(workspace)
    Operation.objects.filter(pk=operation.pk).update(state="needs_review")
    operation.refresh_from_db()
    from ledger.people import replays

    replays.replay_operation(operation, user=operator, reason="customer asked again")

    page = page_of(client, operation)

    assert (
        "You replayed this operation, so you could not approve or reject it even with the approve "
        "permission (four eyes)." in page
    )


def test_no_one_is_told_anything_on_what_they_can_do_themselves(client, login, needing_review):
    login("admin")

    assert "who-can-act" not in page_of(client, needing_review)


# --- unknown -----------------------------------------------------------------------------------------


@pytest.fixture
def unknown(workspace, scripted_action):
    action = scripted_action(external=True)
    operation = submit(workspace, action.name, request_id="R-3")
    Operation.objects.filter(pk=operation.pk).update(state="unknown")
    operation.refresh_from_db()
    return operation


def test_unknown_says_what_each_way_out_does(client, login, unknown):
    login("operator")

    page = page_of(client, unknown)

    assert ">Look up now</button>" in page
    assert (
        "if it has, the operation is marked succeeded; if it has none, "
        "it is sent again under the same key; if it cannot tell, it stays unknown" in page
    )
    assert ">Mark succeeded</button>" in page
    assert "Record its id: the operation becomes succeeded" in page
    assert "Or wait: nothing is sent until the destination has been asked." in page


def test_a_viewer_of_unknown_is_told_who_can_look_it_up(client, login, unknown):
    login("viewer")

    page = page_of(client, unknown)

    assert (
        "You are a viewer of workspace demo; an operator or admin of workspace demo can look it up at the "
        "destination now or resolve it with the destination's record id (there is none yet: a member needs "
        "the operator or admin role; a superuser may too)."
    ) in page


# --- errors and attempts -------------------------------------------------------------------------


def test_an_error_does_not_repeat_its_category(client, login, needing_review):
    login("viewer")

    page = page_of(client, needing_review)

    assert '<span class="error-category">permanent</span> owner does not exist</dd>' in page
    assert "permanent permanent" not in page
    assert "<dd>permanent: owner" not in page
    assert needing_review.audit_events.get(kind="needs_review").message == "permanent: owner does not exist"


def test_attempts_keep_counting_across_a_replay(client, login, needing_review):
    login("operator")

    response = client.post(f"/console/operations/{needing_review.pk}/replay/", {"reason": "owner created"})
    assert messages_of(response) == [("success", f"Replayed {needing_review.key}.")]
    process_due_operations(worker="w2")

    needing_review.refresh_from_db()
    assert needing_review.state == "succeeded"
    assert needing_review.attempts == 1  # since the replay: what the action's attempt limit counts
    assert list(needing_review.attempt_rows.order_by("id").values_list("number", "outcome")) == [
        (1, "permanent"),
        (2, "ok"),
    ]
    page = page_of(client, needing_review)
    assert [int(n) for n in re.findall(r'<td class="num">(\d+)</td> <td><span class="badge outcome', page)] == [1, 2]


def test_attempts_after_a_replay_still_count_toward_the_limit_from_one(workspace, scripted_action, alice):
    from ledger.outcomes import PermanentError, TransientError
    from ledger.people import replays

    action = scripted_action(max_attempts=2)
    action.destination.answer(PermanentError("no"), TransientError("busy"), TransientError("busy"))
    operation = submit(workspace, action.name)
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    replays.replay_operation(operation, user=alice, reason="again")
    process_due_operations(worker="w1")
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=None)
    process_due_operations(worker="w1")

    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert operation.last_error_message == "attempt limit reached (2 of 2): busy"
    assert list(Attempt.objects.order_by("id").values_list("number", flat=True)) == [1, 2, 3]


# --- error pages, DEBUG off ------------------------------------------------------------------------


def assert_styled(response, status: int, *sentences: str) -> str:
    assert settings.DEBUG is False
    assert response.status_code == status
    page = re.sub(r"\s+", " ", response.content.decode())
    assert '<header class="topbar">' in page
    assert 'href="/static/console.css"' in page
    for sentence in sentences:
        assert sentence in page, sentence
    assert 'href="/console/">What needs attention</a>' in page or "Back to" in page
    return page


def test_a_refused_action_shows_the_styled_403_with_the_refusal(client, login, workspace):
    login("operator")
    operation = refund(workspace)

    response = client.post(
        f"/console/operations/{operation.pk}/approve/",
        {"fingerprint": operation.fingerprint},
        HTTP_REFERER=f"http://testserver/console/operations/{operation.pk}/",
    )

    page = assert_styled(
        response, 403, "Not allowed", "operator may not approve or reject in workspace demo.", "Nothing was changed"
    )
    assert ">Log out</button>" in page
    assert f'<a href="http://testserver/console/operations/{operation.pk}/">Back</a>' in page


def test_a_member_of_nothing_is_told_so(client, login):
    login("nobody")

    assert_styled(client.get("/console/"), 403, "nobody is a member of no workspace yet")


def test_a_form_without_its_csrf_token_shows_the_styled_page(django_user_model, needing_review, workspace):
    from ledger.models import Membership

    user = django_user_model.objects.create_user("operator", password="pw")
    Membership.objects.create(user=user, workspace=workspace, role="operator")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)

    response = browser.post(f"/console/operations/{needing_review.pk}/replay/", {"reason": "again"})

    assert_styled(response, 403, "The form had expired", "Nothing was done", "The check said: CSRF cookie not set.")
    needing_review.refresh_from_db()
    assert needing_review.state == "needs_review"


def test_opening_an_actions_address_shows_the_styled_405(client, login, needing_review):
    login("operator")

    response = client.get(f"/console/operations/{needing_review.pk}/replay/")

    assert_styled(response, 405, "This address is not a page", "Nothing was done")
    assert response["Allow"] == "POST"


def test_the_api_keeps_its_own_405(api):
    response = api.get("/api/v1/events")

    assert response.status_code == 405
    assert "topbar" not in response.content.decode()


def test_an_unknown_operation_shows_the_styled_404(client, login):
    login("viewer")

    assert_styled(client.get("/console/operations/999999/"), 404, "Not found")


def test_a_server_error_shows_the_styled_500(client, login, monkeypatch):
    login("viewer")

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("opsconsole.console.views.service_level_standing", broken)
    client.raise_request_exception = False

    assert_styled(
        client.get("/console/service-levels/"),
        500,
        "Something went wrong on our side",
        'href="/console/">Back to the console</a>',
    )


# --- favicon -----------------------------------------------------------------------------------------


def test_the_favicon_is_answered(client, db):
    response = client.get("/favicon.ico")

    assert response.status_code == 302
    assert response.url == "/static/favicon.svg"
    assert finders.find("favicon.svg")
    assert (
        '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
        in client.get("/accounts/login/").content.decode()
    )


def test_a_nested_payload_value_reads_as_json_not_as_python(client, login, make_operation):
    """A notification's body, or any object in a payload, as its sender wrote it: null, not None."""
    operation = make_operation()
    payload = operation.payload | {"body": {"state": "pending", "next_attempt_at": None, "tags": ["a", "b"]}}
    Operation.objects.filter(pk=operation.pk).update(payload=payload)
    login("viewer")

    page = page_of(client, operation)

    assert '{"next_attempt_at": null, "state": "pending", "tags": ["a", "b"]}' in page
    assert "'next_attempt_at': None" not in page
