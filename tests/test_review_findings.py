"""Review of issues 25 (claims) and 26 part 1 (signed webhooks in): each test shows one bug found
by attacking the routes as a hostile sender or a careless operator would. Each fails on main."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from ledger.models import Delivery, Operation
from tests.ledger.test_sources import (  # noqa: F401  (fixtures)
    PLAIN,
    WHSEC,
    github_headers,
    invoice_paid,
    post,
    source,
    standard_headers,
    stripe_headers,
)


# --- signed webhooks in ---------------------------------------------------------------------------


def test_github_signature_with_a_non_ascii_character_is_401_not_500(client, source):
    """Bug: an unauthenticated sender puts one non-ASCII character in X-Hub-Signature-256 and the
    endpoint answers 500: hmac.compare_digest raises TypeError on a non-ASCII str."""
    hooks = source("github")
    body = invoice_paid()
    headers = github_headers(body) | {"X-Hub-Signature-256": "sha256=\u00e9"}
    response = post(client, hooks, body, headers)
    assert response.status_code == 401


def test_stripe_signature_with_a_non_ascii_character_is_401_not_500(client, source):
    """Bug: the same TypeError through Stripe-Signature's v1= value."""
    stripe = source("stripe")
    body = invoice_paid()
    stamp = str(int(datetime.now(UTC).timestamp()))
    response = post(client, stripe, body, {"Stripe-Signature": f"t={stamp},v1=\u00e9"})
    assert response.status_code == 401


@pytest.mark.parametrize("scheme", ["stripe", "standard_webhooks"])
def test_a_twelve_digit_timestamp_beyond_year_9999_is_401_not_500(client, source, scheme):
    """Bug: `_timestamp` lets 12 digits through, but datetime.fromtimestamp(999999999999) raises
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
    """Bug: rules are only compiled when saved; JMESPath type errors happen at search time
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
    """Bug: a source's tolerance_seconds (here 1 hour) is checked first, but the standardwebhooks
    library then applies its own fixed 5-minute window and raises WebhookVerificationError, which
    is reported as `bad_signature`: a correctly signed delivery 10 minutes old is refused with a
    reason that sends people hunting for a wrong secret."""
    hooks = source(tolerance_seconds=3600)
    body = invoice_paid()
    at = datetime.now(UTC) - timedelta(minutes=10)
    response = post(client, hooks, body, standard_headers(body, at=at))
    assert response.status_code == 201, response.json()


# --- integrations apply ---------------------------------------------------------------------------

from io import StringIO  # noqa: E402

from django.core.management import CommandError, call_command  # noqa: E402

from ledger.models import AuditEvent, Source  # noqa: E402


def _apply(tmp_path, text, *args):
    path = tmp_path / "integrations.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("integrations", "apply", str(path), *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    "line",
    [
        "previous_secret_env:",  # YAML null: what a careless operator writes for "none"
        "tolerance_seconds: 100000000000",  # beyond the column's integer
        "secret_env: 12345",  # not a string
    ],
)
def test_integrations_apply_refuses_a_bad_field_with_a_message_not_a_traceback(tmp_path, workspace, line):
    """Bug: `integrations apply` promises a file "checked whole, each problem said where", but these
    pass the checks (and --dry-run says they would apply) and then crash at save with
    IntegrityError / DataError / TypeError instead of CommandError."""
    name = line.split(":")[0]
    fields = {"secret_env": "STRIPE_WEBHOOK_SECRET"}
    text = "sources:\n  - slug: billing\n    workspace: demo\n    scheme: stripe\n"
    text += "".join(f"    {k}: {v}\n" for k, v in fields.items() if k != name) + f"    {line}\n"
    with pytest.raises(CommandError):
        _apply(tmp_path, text)
    assert not Source.objects.exists()


@pytest.mark.parametrize("slug", ["billing/eu", "Billing Hooks", "x" * 60])
def test_integrations_apply_refuses_a_slug_no_url_can_reach(tmp_path, workspace, slug):
    """Bug: the slug is only checked to be a non-empty string: `billing/eu` or `Billing Hooks` is
    saved (Model.save runs no validators) as a source /api/v1/hooks/{source} can never reach (or a
    60-character slug crashes the save with DataError): the file should be refused with a problem."""
    text = f"sources:\n  - slug: {json.dumps(slug)}\n    workspace: demo\n    scheme: stripe\n    secret_env: S\n"
    with pytest.raises(CommandError):
        _apply(tmp_path, text)
    assert not Source.objects.exists()


@pytest.mark.parametrize("secret", ["abcde", "whsec_"])
def test_a_standard_webhooks_secret_that_is_not_base64_is_a_503_not_a_500_on_every_delivery(
    client, source, monkeypatch, secret
):
    """Bug: a Standard Webhooks secret is base64 (after `whsec_`); an operator who sets a plain
    secret like `abcde` (or a bare `whsec_`) passes every check (secret_status says "set") and then
    every delivery, signed or not, is answered 500 (binascii.Error / EmptyWebhookSecretError from
    Webhook(secret)). It should be the 503 "cannot check signatures yet" the route already has for a
    missing secret, and the admin/`integrations apply` should say the secret is unusable."""
    monkeypatch.setenv("HOOK_SECRET", secret)
    hooks = source()
    body = invoice_paid()
    client.raise_request_exception = False
    response = post(client, hooks, body, standard_headers(body))
    assert response.status_code == 503
