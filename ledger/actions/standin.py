"""External actions against the stand-in destination (``standin/``), one per ambiguity policy,
one that moves money and so needs approval (``issue-refund``), and one whose identity is a
person's email address (``send-welcome``). (The demo's ``send-invoice``, which its caller performs,
is configured: examples/integrations.yaml.)

``file-ticket``: the destination honours our idempotency key (the operation key, sent as
``Idempotency-Key``), so an ambiguous try is simply retried with the same key.
``send-notice``: the destination does not deduplicate; the operation key travels as the record's
``reference`` instead, an ambiguous try becomes ``unknown``, and reconciliation looks the
reference up before anything is sent again.
"""

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Annotated, ClassVar

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, StringConstraints

from ledger import keys
from ledger.actions import http
from ledger.actions.base import ActionDefinition, register
from ledger.actions.fields import Email, Owner, RequestId, Text, Version, approved_owner_errors
from ledger.models.policy import OnConflict
from ledger.outcomes import Absent, CannotTell, Found, OutcomeError, Success

LISTING_PAGE_SIZE = 500
# The coded actions' destination as people read it (its address is OPSCONSOLE_STANDIN_URL).
STANDIN_LABEL = "stand-in"


class RecordData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: RequestId
    version: Version
    summary: Text
    owner: Owner


class StandinDestination(ActionDefinition):
    """An action whose records live at the stand-in destination: one record per request version,
    looked up and listed there. Who creates the record is the subclass's to say."""

    schema: ClassVar[type[BaseModel]] = RecordData
    identity_fields = ("request_id", "version")
    fingerprint_fields: tuple[str, ...] = ("request_id", "version", "summary", "owner")
    summary = "{request_id} v{version} · {summary}"
    external = True
    max_attempts = 5
    backoff_base_seconds = 2.0
    backoff_cap_seconds = 120.0
    deadline = timedelta(hours=6)
    # How long after a try began its request may still land at the destination (our timeout plus
    # the destination's own processing): reconciliation waits this long before believing "absent".
    settle_after = timedelta(seconds=30)
    service_level = timedelta(minutes=30)
    # Calls of one batch in flight at once to the stand-in (all its actions share it): a whole
    # claim batch (OPSCONSOLE_CLAIM_BATCH, 50), which it serves one thread per request.
    max_concurrency = 50

    def check(self, workspace, data):
        return approved_owner_errors(workspace, data["owner"])

    def record_payload(self, operation) -> dict:
        """What the destination's record holds: the business fields, without the identity."""
        return {name: operation.payload[name] for name in self.fingerprint_fields if name not in self.identity_fields}

    def destination_name(self) -> str:
        return http.origin(settings.OPSCONSOLE_STANDIN_URL)

    def destination_label(self) -> str:
        # Its name is its address (where the breaker's row and the slots are kept); people read this.
        return STANDIN_LABEL

    def configuration(self) -> dict:
        return super().configuration() | {
            "destination_url": settings.OPSCONSOLE_STANDIN_URL,
            "timeout_seconds": settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS,
        }

    def lookup(self, operation) -> Found | Absent | CannotTell:
        query = {"idempotency_key": operation.key} if self.honours_idempotency_keys else {"reference": operation.key}
        try:
            records = http.send("GET", _records_url(), params=query).json()["records"]
        except (OutcomeError, KeyError, ValueError) as exc:
            return CannotTell(f"lookup failed: {getattr(exc, 'message', type(exc).__name__)}")
        if len(records) > 1:
            return CannotTell(f"{len(records)} records carry this key at the destination", final=True)
        if records:
            return Found(external_id=records[0]["id"], result={"record_id": records[0]["id"]})
        return Absent()

    def our_reference(self, record: dict) -> str | None:
        """The operation key a destination record carries: its idempotency key where the
        destination honours them, else its reference."""
        return record.get("idempotency_key") if self.honours_idempotency_keys else record.get("reference")

    def list_records(self, created_after: datetime, created_before: datetime) -> Iterator[dict]:
        """Every record the destination created in [created_after, created_before), page by page
        (the reconciliation audit reads them). A failed page raises ``OutcomeError``."""
        params = {
            "created_after": created_after.isoformat(),
            "created_before": created_before.isoformat(),
            "page_size": LISTING_PAGE_SIZE,
        }
        while True:
            page = http.send("GET", _records_url(), params=params).json()
            yield from page["records"]
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]


def _records_url() -> str:
    return settings.OPSCONSOLE_STANDIN_URL.rstrip("/") + "/records"


class StandinRecordAction(StandinDestination):
    """Creates one record at the stand-in destination per request version: opsconsole's workers do."""

    def perform(self, operation) -> Success:
        headers = {"Idempotency-Key": operation.key} if self.honours_idempotency_keys else {}
        body = {"reference": operation.key, "payload": self.record_payload(operation)}
        record = http.send("POST", _records_url(), json=body, headers=headers).json()
        return Success(result={"record_id": record["id"]}, external_id=record["id"])


@register
class FileTicket(StandinRecordAction):
    name = "file-ticket"
    honours_idempotency_keys = True


@register
class SendNotice(StandinRecordAction):
    name = "send-notice"
    honours_idempotency_keys = False


class RefundData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Titles: what the console labels each field with ("Amount", not amount_cents).
    request_id: RequestId
    version: Version
    customer_id: Annotated[StrictStr, StringConstraints(min_length=1, max_length=100), Field(title="Customer")]
    amount_cents: Annotated[StrictInt, Field(ge=1, le=100_000_000, title="Amount")]
    currency: Annotated[StrictStr, StringConstraints(pattern=r"^[A-Z]{3}$"), Field(title="Currency")]


@register
class IssueRefund(StandinRecordAction):
    """Moves money: consequential, so a person with the approve permission signs off first."""

    name = "issue-refund"
    schema = RefundData
    fingerprint_fields = ("request_id", "version", "customer_id", "amount_cents", "currency")
    honours_idempotency_keys = True
    consequential = True
    # A refund redelivered with another amount or customer stops until a person decides which is meant.
    on_conflict = OnConflict.HOLD
    service_level = timedelta(days=2)  # an approver signs off first
    sensitive_fields = ("customer_id", "amount_cents")
    money_fields = {"amount_cents": "currency"}
    summary = "{request_id} v{version} · refund in {currency}"

    def check(self, workspace, data):
        return []


class WelcomeData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Identity, normalised (``keys.email_address``: trimmed, domain lower-cased in its IDNA form,
    # local part kept); it enters the key only as a keyed hash (sensitive).
    email: Email
    version: Version
    language: Annotated[StrictStr, StringConstraints(pattern=r"^[a-z]{2}$")]


@register
class SendWelcome(StandinRecordAction):
    """Welcomes a new subscriber: one message per address and sign-up (``version``: the address
    signed up again). The sender has no other identifier for the person, so the address is the
    identity: sensitive, it enters the key as a keyed hash, never in clear (``ledger.keys``)."""

    name = "send-welcome"
    schema = WelcomeData
    identity_fields = ("email", "version")
    normalisers = {"email": keys.email_address, "version": keys.whole_number}
    fingerprint_fields = ("email", "version", "language")
    sensitive_fields = ("email",)
    summary = "Welcome in {language} · sign-up {version}"
    honours_idempotency_keys = False

    def check(self, workspace, data):
        return []

    def record_payload(self, operation) -> dict:
        # The destination needs the address itself (the key carries only its hash).
        return {"email": operation.payload["email"], "language": operation.payload["language"]}
