"""Intake's token checked inside the reservation: a ``POST /api/v1/events`` (or ``/events/batch``)
whose token this process has read before costs one round trip for the token and the reservation
together, and the reservation refuses, having written nothing, a token that changed since: the
request is then answered as a lookup first would have answered it (401, 403, or done with the
person's role as it is now). The claim's routes the same (``POST /api/v1/claims``, ``/claims/batch``
and an outcome report): the token checked inside ``ledger_claim`` or ``ledger_report_outcome``, or
alone before a write or an answer those calls do not make. Every change an attacker or an
offboarding could make is tried here against a token the cache holds;
tests/ledger/core/test_offboarding.py holds the rest."""

import json
from contextlib import contextmanager
from urllib.parse import quote

import pytest
from django.db import DatabaseError, connection

from ledger.core import accounts
from ledger.models import ApiToken, Attempt, AuditEvent, Delivery, Membership, Operation, Workspace

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
MASKED = REFUND | {"customer_id": "••••", "amount_cents": "••••"}


def post(client, token: str, request_id: str, path: str = "/api/v1/events", data: dict | None = None):
    event = {"action": "issue-refund", "data": (data or REFUND) | {"request_id": request_id}}
    body = {"events": [event]} if path.endswith("/batch") else event
    return client.post(path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


@contextmanager
def statements():
    """The statements sent meanwhile, counted, not logged (the query log would write the refund's
    values), but for the savepoints the test's transaction adds."""
    sent: list[str] = []

    def count(execute, sql, params, many, context):
        if "SAVEPOINT" not in sql:
            sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        yield sent


def written() -> tuple:
    """Every row a request of these routes could write or change."""
    return (
        Delivery.objects.count(),
        Operation.objects.count(),
        AuditEvent.objects.count(),
        sorted(Operation.objects.values_list("state", "fencing_token")),
        sorted(Attempt.objects.values_list("id", "outcome", "report")),
    )


@pytest.fixture
def approver(person):
    return person("pat", "approver")


@pytest.fixture
def pats_token(workspace, approver, client) -> str:
    """A person's token, read once (by a first event), so the process holds it."""
    token = accounts.issue_token(workspace=workspace, name="laptop", actor="test", user=approver)
    assert post(client, token, "R-1").status_code == 201
    assert accounts.cached_token(token) is not None
    return token


def test_a_single_event_is_one_round_trip_for_the_token_and_the_reservation(client, pats_token):
    """The reservation (with the token's check) and the sealed audit events with the COMMIT: two
    statements in all, where a lookup of the token came first before."""
    with statements() as sent:
        assert post(client, pats_token, "R-2").status_code == 201
    assert len(sent) == 2, sent
    assert "ledger_reserve_one" in sent[0]
    assert "ledger_apitoken" not in " ".join(sent)


def test_a_batch_is_one_round_trip_for_the_token_and_the_reservation(client, pats_token):
    body = {"events": [{"action": "issue-refund", "data": REFUND | {"request_id": f"R-3{n}"}} for n in range(3)]}
    with statements() as sent:
        response = client.post(
            "/api/v1/events/batch",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {pats_token}",
        )
    assert [result["http_status"] for result in response.json()["results"]] == [201, 201, 201]
    assert len(sent) == 2, sent
    assert "ledger_reserve(" in sent[0]


def test_a_token_not_yet_read_is_looked_up_first(client, workspace, approver):
    token = accounts.issue_token(workspace=workspace, name="new", actor="test", user=approver)
    with statements() as sent:
        assert post(client, token, "R-4").status_code == 201
    assert "ledger_apitoken t" in sent[0]
    with statements() as sent:
        assert post(client, token, "R-41").status_code == 201
    assert len(sent) == 2, sent


REFUSALS = {
    "revoked": lambda token, pat: ApiToken.objects.filter(hint=token[:8]).update(revoked_at="2026-01-01T00:00Z"),
    "deactivated": lambda token, pat: type(pat).objects.filter(pk=pat.pk).update(is_active=False),
    "membership gone": lambda token, pat: Membership.objects.filter(user=pat).delete(),
    "token deleted": lambda token, pat: ApiToken.objects.filter(hint=token[:8]).delete(),
}


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/events/batch"])
@pytest.mark.parametrize("change", REFUSALS)
def test_a_cached_token_that_no_longer_counts_is_refused_and_nothing_is_written(
    client, approver, pats_token, change, path
):
    REFUSALS[change](pats_token, approver)
    before = written()

    response = post(client, pats_token, "R-5", path=path)

    assert response.status_code == 401, response.json()
    assert written() == before
    assert accounts.cached_token(pats_token) is None


@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/events/batch"])
def test_a_scope_removed_is_refused_403_and_nothing_is_written(client, pats_token, path):
    api_token = ApiToken.objects.get(hint=pats_token[:8])
    accounts.set_token_scopes(api_token, scopes=["read"], actor="test")
    before = written()

    response = post(client, pats_token, "R-6", path=path)

    assert response.status_code == 403
    assert response.json()["scope"] == "events"
    assert written() == before


def test_a_demoted_person_sees_the_answer_masked_at_that_very_request(client, workspace, approver, pats_token):
    assert post(client, pats_token, "R-7").json()["operation"]["payload"] == REFUND | {"request_id": "R-7"}
    accounts.set_membership(workspace=workspace, user=approver, role="viewer", actor="test")

    response = post(client, pats_token, "R-8")

    assert response.status_code == 201
    assert response.json()["operation"]["payload"] == MASKED | {"request_id": "R-8"}
    assert Operation.objects.filter(key__contains="R-8").count() == 1


def test_a_token_of_a_deleted_workspace_is_refused(client, workspace):
    """A workspace that never recorded anything (so nothing keeps it; its token made as a row, no
    audit event naming it), its token read by a read route, then deleted with its tokens: the next
    event is refused and nothing names the workspace that is gone."""
    other = Workspace.objects.create(slug="other")
    value = ApiToken.generate()
    ApiToken.objects.create(workspace=other, name="t", token_hash=ApiToken.hash(value), hint=value[:8])
    assert client.get("/api/v1/operations", HTTP_AUTHORIZATION=f"Bearer {value}").status_code == 200
    assert accounts.cached_token(value) is not None
    Workspace.objects.filter(pk=other.pk).delete()

    assert post(client, value, "R-9").status_code == 401
    assert not Delivery.objects.filter(workspace_id=other.pk).exists()


def test_a_workspace_changed_is_read_again(client, workspace, pats_token):
    """Anything of the token's workspace changed makes the cached token stale: looked up again."""
    Workspace.objects.filter(pk=workspace.pk).update(retry_budget_per_hour=7)

    with statements() as sent:
        assert post(client, pats_token, "R-10").status_code == 201
    # The reservation refused (nothing written), the lookup, the reservation again and its audit events.
    assert len(sent) == 4, sent
    assert "ledger_apitoken t" in sent[1]
    assert Operation.objects.filter(key__contains="R-10").count() == 1


def test_a_body_refused_before_the_reservation_is_answered_only_to_a_live_token(client, approver, pats_token):
    """Malformed JSON never reaches the reservation: the token is looked up before it is answered,
    so a revoked one gets 401 (not 400) and no blocked delivery is recorded for it."""
    ApiToken.objects.filter(hint=pats_token[:8]).update(revoked_at="2026-01-01T00:00Z")
    before = written()

    response = client.post(
        "/api/v1/events", "{not json", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {pats_token}"
    )

    assert response.status_code == 401
    assert written() == before


def test_a_malformed_body_of_a_live_cached_token_is_still_answered_400(client, pats_token):
    response = client.post(
        "/api/v1/events", "{not json", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {pats_token}"
    )
    assert response.status_code == 400


def test_an_unknown_token_is_refused_as_before(client, pats_token):
    assert post(client, pats_token[:-1] + "x", "R-11").status_code == 401


def test_the_database_refuses_a_stale_check_itself(workspace, pats_token):
    """The check holds in the database, whoever calls: a digest that is not the token's raises OC401."""
    recheck = accounts.cached_token(pats_token).recheck
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_token_unchanged(%s::jsonb)", [json.dumps(recheck)])
        with pytest.raises(DatabaseError, match="the API token changed") as raised:
            cursor.execute("SELECT ledger_token_unchanged(%s::jsonb)", [json.dumps(recheck | {"digest": "0" * 32})])
    assert accounts.token_changed(raised.value)


# --- the claim's routes ---------------------------------------------------------------------------

INVOICE = {"request_id": "INV-1", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def send(client, token: str, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def invoice(request_id: str) -> dict:
    return {"action": "send-invoice", "delivery_id": request_id, "data": INVOICE | {"request_id": request_id}}


def claimed(client, token: str, request_id: str) -> dict:
    response = send(client, token, "/api/v1/claims", invoice(request_id))
    assert response.status_code == 201, response.json()
    return response.json()


def claim_route(client, token, request_id):
    return lambda: send(client, token, "/api/v1/claims", invoice(request_id))


def claim_by_key_route(client, token, request_id):
    """A claim of a recorded operation by its key (its action read first, then the call)."""
    key = send(client, token, "/api/v1/events", invoice(request_id)).json()["key"]
    return lambda: send(client, token, "/api/v1/claims", {"key": key})


def claim_of_no_operation_route(client, token, request_id):
    """A claim by a key no operation has: answered 404 without a call, so the token is checked alone."""
    return lambda: send(client, token, "/api/v1/claims", {"key": f"demo:{request_id}:send-invoice"})


def claim_batch_route(client, token, request_id):
    body = {"claims": [invoice(f"{request_id}-{n}") for n in range(3)]}
    return lambda: send(client, token, "/api/v1/claims/batch", body)


def claim_batch_with_a_refusal_route(client, token, request_id):
    """A batch with an invalid claim (recorded as a refused delivery, outside the call)."""
    body = {"claims": [invoice(request_id), {"action": "send-invoice", "data": {}}]}
    return lambda: send(client, token, "/api/v1/claims/batch", body)


def succeeded_route(client, token, request_id):
    answer = claimed(client, token, request_id)
    report = {"token": answer["token"], "outcome": "succeeded", "external_id": "in_1", "result": {}}
    return lambda: send(client, token, f"/api/v1/claims/{quote(answer['key'], safe=':')}/outcome", report)


def failed_route(client, token, request_id):
    """A failed report takes the ORM's way: the token checked alone, first."""
    answer = claimed(client, token, request_id)
    report = {"token": answer["token"], "outcome": "failed", "category": "transient", "error": "vendor said 503"}
    return lambda: send(client, token, f"/api/v1/claims/{quote(answer['key'], safe=':')}/outcome", report)


CLAIM_ROUTES = {
    "claim": claim_route,
    "claim by key": claim_by_key_route,
    "claim of no operation": claim_of_no_operation_route,
    "claim batch": claim_batch_route,
    "claim batch with a refusal": claim_batch_with_a_refusal_route,
    "succeeded report": succeeded_route,
    "failed report": failed_route,
}


@pytest.fixture
def claims_token(pats_token, client, send_invoice_action) -> str:
    """Pat's token, read by the claim's routes too (so the cache holds it for them)."""
    assert send(client, pats_token, "/api/v1/claims", invoice("INV-0")).status_code == 201
    assert accounts.cached_token(pats_token) is not None
    return pats_token


@pytest.mark.parametrize("route", CLAIM_ROUTES)
@pytest.mark.parametrize("change", REFUSALS)
def test_a_claim_or_report_of_a_cached_token_that_no_longer_counts_is_refused_and_nothing_is_written(
    client, approver, claims_token, change, route
):
    request = CLAIM_ROUTES[route](client, claims_token, "INV-5")
    REFUSALS[change](claims_token, approver)
    before = written()

    response = request()

    assert response.status_code == 401, response.json()
    assert written() == before
    assert accounts.cached_token(claims_token) is None


@pytest.mark.parametrize("route", CLAIM_ROUTES)
def test_a_claim_or_report_of_a_token_whose_claims_scope_was_removed_is_refused_403(client, claims_token, route):
    request = CLAIM_ROUTES[route](client, claims_token, "INV-6")
    api_token = ApiToken.objects.get(hint=claims_token[:8])
    accounts.set_token_scopes(api_token, scopes=["events", "read"], actor="test")
    before = written()

    response = request()

    assert response.status_code == 403
    assert response.json()["scope"] == "claims"
    assert written() == before


@pytest.mark.parametrize("route", ["claim", "claim of no operation", "claim batch", "claim batch with a refusal"])
def test_a_claim_of_a_token_of_a_deleted_workspace_is_refused(client, send_invoice_action, route):
    """As for an event: a workspace that never recorded anything, its token read by a read route,
    then deleted with its tokens: the next claim is refused and nothing names the workspace that is
    gone. (A report needs a claim first, whose audit events keep the workspace from being deleted.)"""
    other = Workspace.objects.create(slug="other")
    value = ApiToken.generate()
    ApiToken.objects.create(workspace=other, name="t", token_hash=ApiToken.hash(value), hint=value[:8])
    assert client.get("/api/v1/operations", HTTP_AUTHORIZATION=f"Bearer {value}").status_code == 200
    assert accounts.cached_token(value) is not None
    request = CLAIM_ROUTES[route](client, value, "INV-9")
    Workspace.objects.filter(pk=other.pk).delete()
    before = written()

    assert request().status_code == 401
    assert written() == before


def test_a_claim_is_one_round_trip_for_the_token_and_the_call(client, claims_token):
    with statements() as sent:
        assert send(client, claims_token, "/api/v1/claims", invoice("INV-12")).status_code == 201
    assert len(sent) == 2, sent
    assert "ledger_claim_request(" in sent[0]
    assert "ledger_apitoken" not in " ".join(sent)


def test_a_succeeded_report_is_one_round_trip_for_the_token_and_the_call(client, claims_token):
    answer = claimed(client, claims_token, "INV-13")
    report = {"token": answer["token"], "outcome": "succeeded", "external_id": "in_1", "result": {}}
    with statements() as sent:
        response = send(client, claims_token, f"/api/v1/claims/{quote(answer['key'], safe=':')}/outcome", report)
    assert response.json()["state"] == "succeeded"
    assert len(sent) == 2, sent
    assert "ledger_report_outcome(" in sent[0]
    assert "ledger_apitoken" not in " ".join(sent)


def test_a_claim_of_a_token_whose_workspace_changed_is_read_again(client, workspace, claims_token):
    """Anything of the token's workspace changed: the call refuses (nothing written), the token is
    looked up, and the claim made with what it is now."""
    Workspace.objects.filter(pk=workspace.pk).update(retry_budget_per_hour=7)

    with statements() as sent:
        assert send(client, claims_token, "/api/v1/claims", invoice("INV-14")).status_code == 201
    # The call refused, the lookup, the call again and its audit events with the COMMIT.
    assert len(sent) == 4, sent
    assert "ledger_apitoken t" in sent[1]
    assert Operation.objects.filter(key__contains="INV-14", state="processing").count() == 1
