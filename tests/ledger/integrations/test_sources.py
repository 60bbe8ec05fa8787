"""Signed webhooks in: a delivery to /api/v1/hooks/<source> is checked as its
sender signs it, mapped by the source's rules to an event, and recorded whatever becomes of it.
Most senders here sign with the published HMAC recipes; the last section signs with the senders'
own code (``tests/signers.py``: the standardwebhooks library, @octokit/webhooks-methods, stripe)."""

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook

from ledger.integrations.sources import rule_problems
from ledger.models import AuditEvent, Delivery, HookRefusal, Operation, Source, Workspace
from tests import signers

WHSEC = "whsec_" + base64.b64encode(b"a secret of thirty-two bytes!!!!").decode()
OLD_WHSEC = "whsec_" + base64.b64encode(b"the secret being retired........").decode()
PLAIN = "gh-secret-1"

# Stripe's invoice.paid, as the sender's body; the rule maps it onto prepare-brief.
RULES = [
    {
        "event": "invoice.paid",
        "action": "prepare-brief",
        "data": {
            "request_id": "data.object.id",
            "version": "`1`",
            "title": "data.object.description",
            "owner": "'ops'",
        },
        "correlation_id": "data.object.customer",
    }
]


def invoice_paid(invoice="in_1", description="Thank the customer"):
    body = {
        "id": f"evt_{invoice}",
        "type": "invoice.paid",
        "data": {"object": {"id": invoice, "customer": "cus_9", "description": description}},
    }
    return json.dumps(body).encode()


@pytest.fixture
def source(workspace, monkeypatch):
    """Make a source of ``scheme`` whose secrets sit in the environment, as a deployment's would."""
    monkeypatch.setenv("OPSCONSOLE_SOURCE_DEMO_HOOK", WHSEC)
    monkeypatch.setenv("OPSCONSOLE_SOURCE_DEMO_HOOK_OLD", OLD_WHSEC)
    monkeypatch.setenv("OPSCONSOLE_SOURCE_DEMO_GH", PLAIN)

    def make(scheme="standard_webhooks", **fields) -> Source:
        defaults = {
            "secret_env": "OPSCONSOLE_SOURCE_DEMO_GH" if scheme == "github" else "OPSCONSOLE_SOURCE_DEMO_HOOK",
            "rules": RULES,
        }
        return Source.objects.create(
            workspace=workspace, slug=scheme.replace("_", "-"), scheme=scheme, **(defaults | fields)
        )

    return make


def post(client, source, body: bytes, headers: dict):
    extra = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
    return client.post(f"/api/v1/hooks/{source.slug}", body, content_type="application/json", **extra)


def standard_headers(body: bytes, *, secret=WHSEC, msg_id="msg_1", at=None) -> dict:
    at = at or datetime.now(UTC)
    signature = Webhook(secret).sign(msg_id, at, body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())), "webhook-signature": signature}


def github_headers(body: bytes, *, secret=PLAIN, event="issues", delivery="d-1") -> dict:
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": signature, "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}


def stripe_headers(body: bytes, *, secret=WHSEC, at=None) -> dict:
    stamp = str(int((at or datetime.now(UTC)).timestamp()))
    signature = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"Stripe-Signature": f"t={stamp},v1={signature}"}


# --- taken ----------------------------------------------------------------------------------------


def test_a_signed_delivery_becomes_an_event_with_the_senders_id_and_time(client, source):
    hooks = source()
    body = invoice_paid()
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)

    response = post(client, hooks, body, standard_headers(body, msg_id="msg_7", at=at))

    assert response.status_code == 201, response.json()
    operation = Operation.objects.get()
    assert (operation.action, operation.payload["request_id"], operation.payload["owner"]) == (
        "prepare-brief",
        "in_1",
        "ops",
    )
    assert operation.correlation_id == "cus_9"
    delivery = Delivery.objects.get()
    assert (delivery.source, delivery.sender_delivery_id, delivery.occurred_at) == ("webhook", "msg_7", at)
    assert delivery.submitted_by == "source:standard-webhooks"


def test_a_redelivery_is_a_duplicate(client, source):
    hooks = source()
    body = invoice_paid()

    post(client, hooks, body, standard_headers(body))
    again = post(client, hooks, body, standard_headers(body))

    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert Operation.objects.count() == 1


def test_an_event_redelivered_after_the_key_window_is_stale_although_freshly_signed(client, source):
    """Stripe's `created` is the event's own time: kept when the event is sent again months later."""
    stripe = source("stripe")
    created = int((datetime.now(UTC) - timedelta(days=100)).timestamp())
    body = json.loads(invoice_paid("in_old")) | {"created": created}
    body = json.dumps(body).encode()

    response = post(client, stripe, body, stripe_headers(body))

    assert (response.status_code, response.json()["reason"]) == (409, "stale")
    assert not Operation.objects.exists()


def test_a_standard_webhook_payloads_own_timestamp_is_when_it_occurred(client, source):
    happened = (datetime.now(UTC) - timedelta(days=2)).replace(microsecond=0)
    body = json.loads(invoice_paid()) | {"timestamp": happened.isoformat().replace("+00:00", "Z")}
    body = json.dumps(body).encode()

    assert post(client, source(), body, standard_headers(body)).status_code == 201
    assert Delivery.objects.get().occurred_at == happened


def test_during_a_rotation_the_retired_secret_still_verifies(client, source):
    hooks = source(previous_secret_env="OPSCONSOLE_SOURCE_DEMO_HOOK_OLD")
    body = invoice_paid()

    assert post(client, hooks, body, standard_headers(body, secret=OLD_WHSEC)).status_code == 201


def test_github_and_stripe_deliveries_are_verified_by_their_own_headers(client, source):
    github = source("github", rules=[RULES[0] | {"event": "issues", "when": "action == 'opened'"}])
    stripe = source("stripe")
    opened = json.dumps({"action": "opened", "data": {"object": {"id": "gh-1", "description": "Triage"}}}).encode()
    body = invoice_paid("in_2")

    assert post(client, github, opened, github_headers(opened, delivery="gd-1")).status_code == 201
    assert post(client, stripe, body, stripe_headers(body)).status_code == 201
    deliveries = dict(Delivery.objects.values_list("submitted_by", "sender_delivery_id"))
    assert deliveries == {"source:github": "gd-1", "source:stripe": "evt_in_2"}


# --- ignored and refused --------------------------------------------------------------------------


def test_an_event_type_no_rule_maps_is_ignored_and_recorded(client, source):
    hooks = source()
    body = json.dumps({"type": "customer.created", "data": {}}).encode()

    response = post(client, hooks, body, standard_headers(body, msg_id="msg_9"))

    assert response.status_code == 202
    assert response.json() == {"status": "ignored", "event": "customer.created", "delivery_id": "msg_9"}
    delivery = Delivery.objects.get()
    assert (delivery.outcome, delivery.source) == ("ignored", "webhook")
    assert not Operation.objects.exists()


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        (lambda body: standard_headers(body, secret="whsec_" + base64.b64encode(b"x" * 32).decode()), "bad_signature"),
        (lambda body: standard_headers(body, at=datetime.now(UTC) - timedelta(minutes=6)), "stale_timestamp"),
        (lambda body: standard_headers(body, at=datetime.now(UTC) + timedelta(minutes=6)), "stale_timestamp"),
        (
            lambda body: {k: v for k, v in standard_headers(body).items() if k != "webhook-signature"},
            "missing_signature",
        ),
        (lambda body: standard_headers(b'{"type": "invoice.paid", "other": 1}'), "bad_signature"),
    ],
)
def test_a_delivery_that_is_not_the_senders_is_refused_and_counted_without_its_body(client, source, headers, reason):
    hooks = source()
    body = invoice_paid(description="a secret description")

    response = post(client, hooks, body, headers(body))

    assert response.status_code == 401
    assert (response.json()["status"], response.json()["reason"]) == ("blocked", reason)
    assert not Delivery.objects.exists()  # counted instead (tests/ledger/intake/test_hook_refusals.py)
    assert list(HookRefusal.objects.values_list("reason", "count")) == [(reason, 1)]
    assert not Operation.objects.exists()


def test_stripe_and_github_signatures_made_with_another_secret_are_refused(client, source):
    body = invoice_paid()

    stripe = post(client, source("stripe"), body, stripe_headers(body, secret="whsec_other"))
    github = post(client, source("github"), body, github_headers(body, secret="other"))

    assert [stripe.status_code, github.status_code] == [401, 401]
    assert sorted(HookRefusal.objects.values_list("source__slug", "reason")) == [
        ("github", "bad_signature"),
        ("stripe", "bad_signature"),
    ]


def test_a_mapping_that_yields_invalid_data_is_refused_naming_the_field(client, source):
    hooks = source()
    body = json.dumps({"type": "invoice.paid", "data": {"object": {"id": "in_3"}}}).encode()

    response = post(client, hooks, body, standard_headers(body))

    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == ["data.title"]


@pytest.mark.parametrize(("amount", "said"), [("1e999", "is inf"), ("-1e999", "is -inf"), ("nan", "is nan")])
def test_a_mapping_that_computes_a_number_json_cannot_hold_is_refused_naming_the_field(client, source, amount, said):
    """`to_number` of a sender's text can give infinity or NaN, which a body's JSON cannot carry
    (``decode_json`` refuses them) and the database cannot store: a 422 naming the field, not a 500
    when the event is fingerprinted, nor an event that passed a schema's bound."""
    rules = [RULES[0] | {"data": RULES[0]["data"] | {"version": "to_number(data.object.amount)"}}]
    hooks = source(rules=rules)
    body = json.dumps({"type": "invoice.paid", "data": {"object": {"id": "in_4", "amount": amount}}}).encode()

    response = post(client, hooks, body, standard_headers(body))

    assert response.status_code == 422, response.content
    [error] = response.json()["errors"]
    assert error["field"] == "data.version"
    assert error["message"] == f"{said}, a number JSON cannot hold"
    assert Delivery.objects.get().outcome == Delivery.Outcome.INVALID


def test_a_signed_body_that_is_not_json_is_malformed(client, source):
    body = b"not json"

    response = post(client, source(), body, standard_headers(body))

    assert (response.status_code, response.json()["reason"]) == (400, "malformed_json")


def test_an_unknown_source_is_not_found_and_a_missing_secret_is_unavailable(client, source, monkeypatch):
    hooks = source()
    body = invoice_paid()
    assert client.post("/api/v1/hooks/nobody", body, content_type="application/json").status_code == 404

    monkeypatch.delenv("OPSCONSOLE_SOURCE_DEMO_HOOK")
    response = post(client, hooks, body, standard_headers(body))

    assert (response.status_code, response.headers["Retry-After"]) == (503, "60")
    assert not Delivery.objects.exists()


# --- checking the rules ---------------------------------------------------------------------------


def test_good_rules_have_no_problems():
    assert rule_problems(RULES) == []


@pytest.mark.parametrize(
    ("rules", "problem"),
    [
        ({"event": "x"}, "rules: must be a list of rules"),
        ([RULES[0] | {"action": "no-such"}], "rules[0].action: 'no-such' is not a registered action"),
        ([RULES[0] | {"data": {"title": "data.[["}}], "rules[0].data.title: does not compile"),
        ([RULES[0] | {"when": "=="}], "rules[0].when: does not compile"),
        ([RULES[0] | {"event": ""}], "rules[0].event: the sender's event type"),
        ([RULES[0] | {"extra": 1}], "rules[0]: unknown keys extra"),
    ],
)
def test_bad_rules_are_refused_saying_where(rules, problem):
    assert any(found.startswith(problem) for found in rule_problems(rules)), rule_problems(rules)


def test_an_endpoint_verification_challenge_is_answered_with_the_current_secret(client, source):
    hooks = source()

    response = post(client, hooks, b"", {"webhook-challenge": "c-123"})

    assert (response.status_code, response.json()) == (200, {"status": "verified"})
    Webhook(WHSEC).verify_endpoint_verification_response("c-123", response.headers["webhook-challenge-response"])
    assert list(HookRefusal.objects.values_list("reason", "count")) == [("challenge", 1)]


# --- configuring a source in the admin ------------------------------------------------------------


def test_a_superuser_configures_a_source_in_the_admin_and_sees_only_whether_its_secret_is_set(
    admin_client, workspace, monkeypatch
):
    monkeypatch.setenv("OPSCONSOLE_SOURCE_DEMO_HOOK", WHSEC)
    form = {
        "workspace": workspace.pk,
        "slug": "billing",
        "scheme": "stripe",
        "secret_env": "OPSCONSOLE_SOURCE_DEMO_HOOK",
        "previous_secret_env": "",
        "tolerance_seconds": 300,
        "rules": json.dumps(RULES),
    }

    response = admin_client.post("/admin/ledger/source/add/", form)

    assert response.status_code == 302
    source = Source.objects.get(slug="billing")
    assert source.rules == RULES
    assert workspace.audit_events.filter(kind="source_created").count() == 1
    page = admin_client.get(f"/admin/ledger/source/{source.pk}/change/").content.decode()
    assert "OPSCONSOLE_SOURCE_DEMO_HOOK: set" in page
    assert WHSEC not in page


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rules", json.dumps([RULES[0] | {"when": "=="}]), "rules[0].when: does not compile"),
        ("secret_env", WHSEC, "secret_env: the name of an environment variable"),
    ],
)
def test_the_admin_refuses_a_source_that_cannot_work_saying_where(admin_client, workspace, field, value, message):
    form = {
        "workspace": workspace.pk,
        "slug": "billing",
        "scheme": "stripe",
        "secret_env": "OPSCONSOLE_SOURCE_DEMO_HOOK",
        "tolerance_seconds": 300,
        "rules": json.dumps(RULES),
    } | {field: value}

    response = admin_client.post("/admin/ledger/source/add/", form)

    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Source.objects.exists()


# --- signed with the senders' own code ------------------------------------------------------------


def test_a_delivery_signed_by_the_standard_webhooks_library_is_taken(client, source):
    body = invoice_paid("in_sw")
    at = datetime.now(UTC)

    response = post(client, source(), body, signers.standard_webhooks(WHSEC, "msg_sw", body, at))

    assert response.status_code == 201
    assert Delivery.objects.get().sender_delivery_id == "msg_sw"


@signers.needs_node
def test_a_delivery_signed_by_octokit_is_taken_and_a_redelivery_is_a_duplicate(client, source):
    github = source("github", rules=[RULES[0] | {"event": "issues", "when": "action == 'opened'"}])
    body = json.dumps({"action": "opened", "data": {"object": {"id": "gh-7", "description": "Triage é"}}}).encode()
    headers = signers.github(PLAIN, body, event="issues", delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")

    first = post(client, github, body, headers)
    again = post(client, github, body, headers)

    assert [first.status_code, again.status_code] == [201, 200]
    assert Operation.objects.get().payload["title"] == "Triage é"


@signers.needs_node
def test_a_delivery_signed_by_stripes_library_is_taken_and_a_wrong_secret_is_refused(client, source):
    stripe = source("stripe")
    body = invoice_paid("in_st")
    now = int(datetime.now(UTC).timestamp())

    taken = post(client, stripe, body, signers.stripe(WHSEC, body, now))
    forged = post(
        client, stripe, invoice_paid("in_forged"), signers.stripe("whsec_not_ours", invoice_paid("in_forged"), now)
    )
    old = post(client, stripe, invoice_paid("in_old"), signers.stripe(WHSEC, invoice_paid("in_old"), now - 3600))

    assert taken.status_code == 201
    assert (forged.status_code, forged.json()["reason"]) == (401, "bad_signature")
    assert (old.status_code, old.json()["reason"]) == (401, "stale_timestamp")
    assert list(Delivery.objects.values_list("outcome", flat=True)) == ["accepted"]
    assert sorted(HookRefusal.objects.values_list("reason", "count")) == [("bad_signature", 1), ("stale_timestamp", 1)]


def test_a_workspace_admin_configures_their_workspaces_sources_and_an_operator_only_sees_them(
    client, workspace, person
):
    from django.contrib import admin

    billing = Source.objects.create(
        workspace=workspace, slug="billing", scheme="stripe", secret_env="OPSCONSOLE_SOURCE_DEMO_HOOK"
    )
    Workspace.objects.create(slug="other")
    operator = person("op", "operator")
    boss = person("boss", "admin")
    for user in (operator, boss):
        user.is_staff = True
        user.save()
    form = {"workspace": workspace.pk, "slug": "repo", "scheme": "github", "secret_env": "OPSCONSOLE_SOURCE_DEMO_REPO"}
    form |= {"tolerance_seconds": 300, "rules": "[]", "previous_secret_env": ""}

    client.force_login(operator)
    assert "billing" in client.get("/admin/ledger/source/").content.decode()
    assert client.post("/admin/ledger/source/add/", form).status_code == 403
    assert client.post(f"/admin/ledger/source/{billing.pk}/change/", form | {"slug": "billing"}).status_code == 403

    client.force_login(boss)
    added = client.post("/admin/ledger/source/add/", form)
    choices = client.get("/admin/ledger/source/add/").context["adminform"].form.fields["workspace"].queryset

    assert added.status_code == 302, added.content.decode()[:2000]
    assert Source.objects.get(slug="repo").workspace == workspace
    assert list(choices.values_list("slug", flat=True)) == ["demo"]  # not the workspace they are no admin of
    assert AuditEvent.objects.filter(kind="source_created", actor="boss").exists()
    assert not admin.site.get_model_admin(Source).has_delete_permission(added.wsgi_request)


# --- found by an adversarial review: hostile senders get a 401 or a recorded refusal, never a 500 -----


def test_github_signature_with_a_non_ascii_character_is_401_not_500(client, source):
    """Found in review: an unauthenticated sender puts one non-ASCII character in X-Hub-Signature-256 and the
    endpoint answers 500: hmac.compare_digest raises TypeError on a non-ASCII str."""
    hooks = source("github")
    body = invoice_paid()
    headers = github_headers(body) | {"X-Hub-Signature-256": "sha256=\u00e9"}
    response = post(client, hooks, body, headers)
    assert response.status_code == 401


def test_stripe_signature_with_a_non_ascii_character_is_401_not_500(client, source):
    """Found in review: the same TypeError through Stripe-Signature's v1= value."""
    stripe = source("stripe")
    body = invoice_paid()
    stamp = str(int(datetime.now(UTC).timestamp()))
    response = post(client, stripe, body, {"Stripe-Signature": f"t={stamp},v1=\u00e9"})
    assert response.status_code == 401


@pytest.mark.parametrize("scheme", ["stripe", "standard_webhooks"])
def test_a_twelve_digit_timestamp_beyond_year_9999_is_401_not_500(client, source, scheme):
    """Found in review: `_timestamp` lets 12 digits through, but datetime.fromtimestamp(999999999999) raises
    ValueError (year 33658): an unsigned request answered 500."""
    hooks = source(scheme)
    body = invoice_paid()
    if scheme == "stripe":
        headers = {"Stripe-Signature": "t=999999999999,v1=00"}
    else:
        headers = {"webhook-id": "m", "webhook-timestamp": "999999999999", "webhook-signature": "v1,AA=="}
    response = post(client, hooks, body, headers)
    assert response.status_code == 401


def test_a_rule_expression_that_fails_at_run_time_on_a_signed_body_is_not_a_500(client, source):
    """Found in review: rules are only compiled when saved; JMESPath type errors happen at search time
    (`contains(null, ...)`, `length(number)`). A genuine, correctly signed delivery whose body lacks
    the field is answered 500 (the sender retries it for days) and nothing records it: it should be
    refused (422, recorded) or ignored, never a server error."""
    rules = [
        {
            "event": "invoice.paid",
            "when": "contains(data.object.tags, 'vip')",
            "action": "prepare-brief",
            "data": {"request_id": "data.object.id", "version": "`1`", "title": "'t'", "owner": "'ops'"},
        }
    ]
    hooks = source(rules=rules)
    body = invoice_paid()  # no data.object.tags
    client.raise_request_exception = False
    response = post(client, hooks, body, standard_headers(body))
    assert response.status_code != 500
    assert Delivery.objects.exists()


def test_a_tolerance_over_five_minutes_is_honoured_for_standard_webhooks(client, source):
    """Found in review: a source's tolerance_seconds (here 1 hour) is checked first, but the standardwebhooks
    library then applies its own fixed 5-minute window and raises WebhookVerificationError, which
    is reported as `bad_signature`: a correctly signed delivery 10 minutes old is refused with a
    reason that sends people hunting for a wrong secret."""
    hooks = source(tolerance_seconds=3600)
    body = invoice_paid()
    at = datetime.now(UTC) - timedelta(minutes=10)
    response = post(client, hooks, body, standard_headers(body, at=at))
    assert response.status_code == 201, response.json()


@pytest.mark.parametrize("secret", ["abcde", "whsec_"])
def test_a_standard_webhooks_secret_that_is_not_base64_is_a_503_not_a_500_on_every_delivery(
    client, source, monkeypatch, secret
):
    """Found in review: a Standard Webhooks secret is base64 (after `whsec_`); an operator who sets a plain
    secret like `abcde` (or a bare `whsec_`) passes every check (secret_status says "set") and then
    every delivery, signed or not, is answered 500 (binascii.Error / EmptyWebhookSecretError from
    Webhook(secret)). It should be the 503 "cannot check signatures yet" the route already has for a
    missing secret, and the admin/`integrations apply` should say the secret is unusable."""
    monkeypatch.setenv("OPSCONSOLE_SOURCE_DEMO_HOOK", secret)
    hooks = source()
    body = invoice_paid()
    client.raise_request_exception = False
    response = post(client, hooks, body, standard_headers(body))
    assert response.status_code == 503
