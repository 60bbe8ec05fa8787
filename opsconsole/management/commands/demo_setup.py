import json
import os
import shlex
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from ledger.callers import claims
from ledger.core import accounts
from ledger.intake import submit
from ledger.integrations import file as integrations_file
from ledger.models import Delivery, Role, Workspace
from opsconsole.api import answers

DEMO_PASSWORD = "demo-password"
# How a person runs a command against the demo from the checkout, as `make demo` does: the project's
# virtualenv, and DEBUG on (the demo's development secret key; without it settings refuse to start).
DEMO_MANAGE = "DEBUG=1 .venv/bin/python manage.py"


def demo_manage() -> str:
    """DEMO_MANAGE, after the demo database's URL when `make demo` started the embedded PostgreSQL
    for it (opsconsole/embedded_db.py): another terminal has no DATABASE_URL, and the server's port
    is the one of this run. A DATABASE_URL the person gave is theirs already: not printed."""
    from opsconsole import embedded_db

    given, port = os.environ.get("DATABASE_URL", ""), embedded_db.running_port()
    return f"DATABASE_URL={given} {DEMO_MANAGE}" if port and given == embedded_db.url(port) else DEMO_MANAGE


STAFF = [("admin", True), ("operator", False), ("approver", False)]
# What each non-superuser may do in the demo workspace's console (/console/).
ROLES = {"operator": Role.OPERATOR, "approver": Role.APPROVER}

# The seed's R-42 story: new, a re-delivery, a changed title without a new version, version 4.
R42 = {"request_id": "R-42", "version": 3, "title": "Review renewal options", "owner": "ops"}
INVOICE = {"request_id": "INV-1", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}
EVENTS = [
    {"action": "prepare-brief", "delivery_id": "delivery-1", "data": R42},
    {"action": "prepare-brief", "delivery_id": "delivery-2", "data": R42},
    {"action": "prepare-brief", "delivery_id": "delivery-3", "data": R42 | {"title": "Changed without a new version"}},
    {"action": "prepare-brief", "delivery_id": "delivery-4", "data": R42 | {"version": 4}},
    # An external action: a record at the stand-in destination, sent with our idempotency key.
    {
        "action": "file-ticket",
        "delivery_id": "delivery-5",
        "data": {"request_id": "R-42", "version": 3, "summary": "Renewal review needed", "owner": "ops"},
    },
    # Moves money: waits for the approver (DEMO_MANAGE approve ... --as approver).
    {
        "action": "issue-refund",
        "delivery_id": "delivery-6",
        "data": {"request_id": "R-42", "version": 3, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"},
    },
    # Latest wins (update-status): version 2 of R-42 supersedes its version 1, which has not run;
    # version 1 of R-43, arriving after its version 2, is answered stale.
    {
        "action": "update-status",
        "delivery_id": "delivery-7",
        "data": {"request_id": "R-42", "version": 1, "status": "received"},
    },
    {
        "action": "update-status",
        "delivery_id": "delivery-8",
        "data": {"request_id": "R-42", "version": 2, "status": "in_review"},
    },
    {
        "action": "update-status",
        "delivery_id": "delivery-9",
        "data": {"request_id": "R-43", "version": 2, "status": "approved"},
    },
    {
        "action": "update-status",
        "delivery_id": "delivery-10",
        "data": {"request_id": "R-43", "version": 1, "status": "received"},
    },
]

# The demo's integrations, applied as any integrations file is (``ledger.integrations.file``): a billing
# system's signed webhooks come in through the `billing` source, and each paid invoice becomes one
# `fulfil-invoice` operation calling the fulfilment system (the stand-in destination) — a destination
# and an HTTP action configured, not coded; `send-invoice`, which its caller performs (docs/claims.md),
# is configured there too. The secrets are the demo's (the Makefile's demo target exports them), never
# stored: the file names only their variables.
INTEGRATIONS_FILE = Path(settings.BASE_DIR) / "examples" / "integrations.yaml"


def integrations_document(standin_url: str = "") -> dict:
    """The demo's integrations file as the demo applies it: every destination in it is the stand-in,
    so each ``base_url`` is the stand-in's (``standin_url``, else OPSCONSOLE_STANDIN_URL), wherever
    it runs; the rest as written."""
    document = integrations_file.read(INTEGRATIONS_FILE.read_text())
    for destination in document.get("destinations") or []:
        destination["base_url"] = standin_url or settings.OPSCONSOLE_STANDIN_URL
    return document


HOOK_SECRET_ENV = "OPSCONSOLE_SOURCE_DEMO_HOOK_SECRET"


def webhook_command(url: str) -> str:
    """The sender a person runs from the checkout to sign an invoice.paid for the billing source,
    with the demo's secret (the server must have the same in its environment, as `make demo` does)."""
    secret = os.environ.get(HOOK_SECRET_ENV, "")
    if not secret:
        return f"off (set {HOOK_SECRET_ENV} to a whsec_ secret for the billing source; `make demo` does)"
    return (
        f".venv/bin/python -m opsconsole.send_webhook --url {url}api/v1/hooks/billing --example invoice.paid "
        f"--secret {shlex.quote(secret)}   (twice: 201, then 200 duplicate)"
    )


class Command(BaseCommand):
    help = "Set up the demo: workspace 'demo' (owner ops), staff users, a fresh API token, the R-42 events."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000/")
        parser.add_argument(
            "--summary",
            default="",
            help="Write the console's address, users and token to this file (mode 600), not standard output: "
            "`make demo` prints it last and deletes it.",
        )

    def handle(self, *args, url, summary, **options):
        workspace = Workspace.objects.filter(slug="demo").first()
        if workspace is None:
            workspace, token = accounts.create_workspace(slug="demo", approved_owners=["ops"], actor="demo")
            self._integrations()  # first: the example claims a send-invoice, which the file configures
            self._example(workspace)
        else:
            # Set up before (its data is kept in var/postgres): the example is there already, and
            # sending it again would only add duplicate deliveries. A fresh token, as every run.
            token = accounts.issue_token(workspace=workspace, name="demo", actor="demo")
            operations = workspace.operations.count()
            self.stdout.write(
                f"Workspace demo set up before: {operations:,} operations kept (the R-42 example among them)."
            )
            self._integrations()
        self._ensure_staff(workspace)
        lines = self._where_to_go(url, token)
        if not summary:
            self.stdout.write("")
            for line in lines:
                self.stdout.write(line)
            return
        # Readable by this user only: it holds the workspace's token until `make demo` prints it.
        descriptor = os.open(summary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write("\n".join(lines) + "\n")

    @staticmethod
    def _where_to_go(url: str, token: str) -> list[str]:
        """The console's address and users, the commands to try, and the token, last."""
        lines = [
            f"Console:  {url}console/   users: admin, operator, approver  password: {DEMO_PASSWORD}",
            f"Dashboard: {url}console/dashboard/",
            f"API:      {url}api/v1/docs  (OpenAPI: {url}api/v1/openapi.json)",
        ]
        if settings.OPSCONSOLE_METRICS_TOKEN:
            lines.append(
                f"Metrics:  curl -s -H 'Authorization: Bearer {settings.OPSCONSOLE_METRICS_TOKEN}' {url}metrics"
            )
        else:
            lines.append("Metrics:  off (set OPSCONSOLE_METRICS_TOKEN to serve /metrics)")
        example = json.dumps({"action": "prepare-brief", "data": R42 | {"version": 5}})
        lines.append(
            f"Try:      curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' "
            f"-d '{example}' {url}api/v1/events"
        )
        claim = json.dumps({"action": "send-invoice", "data": INVOICE | {"request_id": "INV-2"}, "lease_seconds": 60})
        lines.append(
            f"Claim:    curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' "
            f"-d '{claim}' {url}api/v1/claims   (docs/claims.md: act, then report the outcome)"
        )
        lines.append(f"Webhook:  {webhook_command(url)}")
        lines.append(f"Approve:  {demo_manage()} approve demo:R-42:v3:issue-refund --workspace demo --as approver")
        lines.append(f"API token for workspace demo: {token}")
        return lines

    def _example(self, workspace):
        self.stdout.write("Submitting the R-42 example:")
        for event in EVENTS:
            result = submit.submit_event(
                workspace=workspace, raw=event, source=Delivery.Source.CLI, submitted_by="demo"
            )
            body = answers.intake_body(result)
            outcome = " ".join(filter(None, [body["status"], body.get("reason"), body.get("key")]))
            self.stdout.write(f"  {event['delivery_id']}: {outcome}")
        self._abandoned_claim(workspace)

    def _abandoned_claim(self, workspace):
        """A caller that claims an invoice and never reports: its lease runs out, the sweep makes
        the operation unknown, and reconciliation asks the stand-in before anyone acts again."""
        answer = claims.claim(
            workspace=workspace,
            raw={"action": "send-invoice", "data": INVOICE, "lease_seconds": 5},
            submitted_by="demo-flow",
        )
        self.stdout.write(f"  claim of INV-1 by demo-flow: {answer.status} (it never reports: watch it in the queue)")

    def _integrations(self):
        changes = integrations_file.apply(integrations_document(), actor="demo")
        where = INTEGRATIONS_FILE.relative_to(settings.BASE_DIR)
        self.stdout.write(f"Integrations from {where} (destinations at {settings.OPSCONSOLE_STANDIN_URL}):")
        for change in changes or ["no changes"]:
            self.stdout.write(f"  {change}")
        self.stdout.write("  source billing: invoice.paid -> fulfil-invoice at destination fulfilment (the stand-in)")
        self.stdout.write("  send-invoice: performed by its caller, looked up at destination invoicing (the stand-in)")

    @transaction.atomic
    def _ensure_staff(self, workspace):
        users = get_user_model()
        for username, superuser in STAFF:
            user, _ = users.objects.get_or_create(username=username, defaults={"is_staff": True})
            user.is_staff = True
            user.is_superuser = superuser
            user.set_password(DEMO_PASSWORD)
            user.save()
            if username in ROLES:
                accounts.set_membership(workspace=workspace, user=user, role=ROLES[username], actor="demo")
