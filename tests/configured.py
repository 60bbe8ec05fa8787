"""The configured destinations and HTTP actions the tests run against third-party servers:
written as an integrations file, as a team would write one, and applied through `manage.py
integrations apply`. No Python defines these actions.

- `create-ticket` at json-server (`helpdesk`): no idempotency; our key travels as the ticket's
  `source_key`, and a lost answer is looked up by `GET /tickets?source_key=…`.
- `charge-customer` at stripe-stateful-mock (`stripe`): form-encoded, bearer key from the
  environment, `Idempotency-Key` honoured for 24 h; a lost answer is reconciled by repeating the
  request under the same key.
- `send-invoice`, the demo's (examples/integrations.yaml), performed by its caller: its
  `invoicing` destination is the stand-in, asked by lookup and listing (``apply_send_invoice``).
"""

from io import StringIO
from pathlib import Path

from django.core.management import call_command

from tests import third_party

STRIPE_KEY_ENV = "OPSCONSOLE_TEST_STRIPE_KEY"

HELPDESK = """
  - slug: helpdesk
    base_url: {url}
    timeout_seconds: 2
    max_concurrency: {max_concurrency}
    rate_limit_per_second: {rate_limit}
    breaker_threshold: {breaker_threshold}
    breaker_cooldown_seconds: {breaker_cooldown}
"""
STRIPE = """
  - slug: stripe
    base_url: {url}
    auth: bearer
    secret_env: OPSCONSOLE_TEST_STRIPE_KEY
    idempotency_header: Idempotency-Key
    idempotency_key_retention_seconds: 86400
    timeout_seconds: 1
    error_code: error.code || error.type
"""
CREATE_TICKET = """
  - name: create-ticket
    destination: helpdesk
    schema:
      type: object
      additionalProperties: false
      required: [request_id, title, priority]
      properties:
        request_id: {{type: string, minLength: 1, maxLength: 200}}
        title: {{type: string, minLength: 1, maxLength: 500}}
        priority: {{enum: [low, normal, high]}}
    identity_fields: [request_id]
    normalisers: {{request_id: identifier}}
    fingerprint_fields: [request_id, title, priority]
    max_attempts: {max_attempts}
    backoff_base_seconds: 1
    backoff_cap_seconds: 5
    settle_after_seconds: 0
    request:
      method: POST
      path: /tickets
      headers: {{X-Request-Id: "{{{{ data.request_id }}}}"}}
      body:
        source_key: "{{{{ key }}}}"
        title: "{{{{ data.title }}}}"
        priority: "{{{{ data.priority }}}}"
    response:
      record_id: id
    lookup:
      path: "/tickets?source_key={{{{ key }}}}"
"""
CHARGE_CUSTOMER = """
  - name: charge-customer
    destination: stripe
    schema:
      type: object
      additionalProperties: false
      required: [request_id, customer, amount_cents, currency]
      properties:
        request_id: {{type: string, minLength: 1, maxLength: 200}}
        customer: {{type: string, minLength: 1}}
        amount_cents: {{type: integer, minimum: 50, maximum: 99999999}}
        currency: {{type: string, pattern: "^[a-z]{{3}}$"}}
    identity_fields: [request_id]
    normalisers: {{request_id: identifier}}
    fingerprint_fields: [request_id, customer, amount_cents, currency]
    sensitive_fields: [customer]
    money_fields: {{amount_cents: currency}}
    max_attempts: {max_attempts}
    backoff_base_seconds: 0.1
    backoff_cap_seconds: 0.2
    settle_after_seconds: 0
    request:
      method: POST
      path: /v1/charges
      body_format: form
      body:
        amount: "{{{{ data.amount_cents }}}}"
        currency: "{{{{ data.currency }}}}"
        source: tok_visa
        description: "{description}"
        metadata: {{source_key: "{{{{ key }}}}", customer: "{{{{ data.customer }}}}"}}
    response:
      record_id: id
      message: error.message
    lookup:
      repeat: true
"""


def document(
    *,
    json_server=None,
    stripe_mock=None,
    max_attempts: int = 5,
    max_concurrency: int = 4,
    rate_limit="null",
    breaker_threshold="null",
    breaker_cooldown: int = 30,
    description: str = "charged by opsconsole",
) -> str:
    """The integrations file for the servers given."""
    destinations, actions = [], []
    if json_server is not None:
        destinations.append(
            HELPDESK.format(
                url=json_server.url,
                max_concurrency=max_concurrency,
                rate_limit=rate_limit,
                breaker_threshold=breaker_threshold,
                breaker_cooldown=breaker_cooldown,
            )
        )
        actions.append(CREATE_TICKET.format(max_attempts=max_attempts))
    if stripe_mock is not None:
        destinations.append(STRIPE.format(url=stripe_mock.url))
        actions.append(CHARGE_CUSTOMER.format(max_attempts=max_attempts, description=description))
    return "destinations:" + "".join(destinations) + "\nhttp_actions:" + "".join(actions)


def apply(directory: Path, **options) -> str:
    """Apply ``document(**options)`` with `manage.py integrations apply`; its output."""
    path = Path(directory) / "integrations.yaml"
    path.write_text(document(**options))
    out = StringIO()
    call_command("integrations", "apply", str(path), stdout=out)
    return out.getvalue()


def stripe_key(monkeypatch) -> None:
    """The bearer key the `stripe` destination reads from the environment."""
    monkeypatch.setenv(STRIPE_KEY_ENV, third_party.STRIPE_TEST_KEY)


def apply_send_invoice(standin_url: str, **changes) -> None:
    """Apply the demo's `send-invoice` and its destination from examples/integrations.yaml, as
    `make demo` does (its destination at ``standin_url``), with ``changes`` to the action's fields."""
    from ledger.integrations import file
    from opsconsole.management.commands.demo_setup import integrations_document

    document = integrations_document(standin_url)
    [action] = [action for action in document["http_actions"] if action["name"] == "send-invoice"]
    destinations = [
        destination for destination in document["destinations"] if destination["slug"] == action["destination"]
    ]
    file.apply({"destinations": destinations, "http_actions": [action | changes]}, actor="test")
