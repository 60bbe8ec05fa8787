"""Send one signed webhook, as a Standard Webhooks sender would: the body signed with the
``standardwebhooks`` library, POSTed with ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature``; prints the status and the answer (docs/integrations.md).

    python -m opsconsole.send_webhook --url http://127.0.0.1:8000/api/v1/hooks/billing --example invoice.paid
    python -m opsconsole.send_webhook --url URL --body event.json       (a file; - reads stdin)
    python -m opsconsole.send_webhook --url URL '{"type": "invoice.paid", "data": {...}}'

The secret is ``--secret`` or, by default, the demo's ``OPSCONSOLE_SOURCE_DEMO_HOOK_SECRET`` (``whsec_``
and base64). Exit status: 0 when the answer is 2xx, 1 for any other answer or none, 2 for bad input.
It needs no settings and no database: a person runs it from the checkout, as a sender would.
"""

import argparse
import json
import os
import sys
import uuid
from datetime import UTC, datetime

import httpx
from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

SECRET_ENV = "OPSCONSOLE_SOURCE_DEMO_HOOK_SECRET"


def invoice_paid(now: datetime) -> dict:
    """A billing system's invoice.paid in the Standard Webhooks payload shape (type, timestamp,
    data). The invoice is fixed, so sending it again is the same event: a duplicate."""
    return {
        "type": "invoice.paid",
        "timestamp": now.isoformat().replace("+00:00", "Z"),
        "data": {"invoice_id": "INV-7", "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"},
    }


EXAMPLES = {"invoice.paid": invoice_paid}


def signed_headers(secret: str, msg_id: str, body: bytes, now: datetime) -> dict[str, str]:
    """The Standard Webhooks headers for ``body``, signed by the library (not by us)."""
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, now, body),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opsconsole.send_webhook", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the source's endpoint, e.g. .../api/v1/hooks/billing")
    parser.add_argument("--secret", default=os.environ.get(SECRET_ENV, ""), help=f"whsec_... (default: ${SECRET_ENV})")
    parser.add_argument("--id", default="", help="the webhook-id (default: a new msg_... each run)")
    body = parser.add_mutually_exclusive_group(required=True)
    body.add_argument("json", nargs="?", metavar="JSON", help="the body, inline")
    body.add_argument("--body", type=argparse.FileType("rb"), help="a file holding the JSON body (- for stdin)")
    body.add_argument("--example", choices=sorted(EXAMPLES), help="a ready-made event")
    args = parser.parse_args(argv)

    now = datetime.now(UTC)
    if args.example:
        payload = json.dumps(EXAMPLES[args.example](now)).encode()
    else:
        # Sent exactly as given (the signature covers these bytes), once it is known to be JSON.
        if args.body:
            with args.body:
                payload = args.body.read()
        else:
            payload = args.json.encode()
        try:
            json.loads(payload)
        except ValueError as exc:
            parser.error(f"the body is not JSON: {exc}")
    if not args.secret:
        parser.error(f"no secret: pass --secret whsec_... or set {SECRET_ENV}")
    try:
        headers = signed_headers(args.secret, args.id or f"msg_{uuid.uuid4().hex}", payload, now)
    except (ValueError, EmptyWebhookSecretError):
        parser.error("the secret is not a Standard Webhooks secret (whsec_ and base64)")

    try:
        answer = httpx.post(args.url, content=payload, headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        print(f"could not send to {args.url}: {exc}", file=sys.stderr)
        return 1
    print(answer.status_code, answer.reason_phrase)
    print(answer.text)
    return 0 if answer.is_success else 1


if __name__ == "__main__":
    sys.exit(main())
