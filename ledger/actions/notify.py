"""``notify-subscriber``: the ledger's own action that tells a subscription's receiver an operation
changed, as a Standard Webhooks sender does (docs/integrations.md, Notifications).

Nobody submits it: ``ledger.core.announcements`` reserves one operation per (subscription, change,
event, operation), in the transaction of the change it announces, and the engine performs it as any external
action, with retries, backoff and the audit trail (no breaker: below). Its key is the ``webhook-id``, so a
receiver that deduplicates by webhook-id (as Standard Webhooks asks) takes a repeat of one
notification once; a try whose answer was lost is repeated under that id (the receiver "honours the
key"), never turned into an unknown a person must settle.
"""

import json
import os
from datetime import timedelta
from typing import ClassVar

from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field
from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

from ledger import keys
from ledger.actions import http, secret_names
from ledger.actions.base import ActionDefinition, register
from ledger.outcomes import Absent, PermanentError, Success

NAME = "notify-subscriber"


class NotificationData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subscription: int = Field(ge=1)
    subscription_name: str
    change: int = Field(ge=1, description="The audit event of the change announced.")
    event: str
    # A resumed pause is one change of every operation it held: the operation tells them apart.
    operation: int = Field(ge=1, description="The id of the operation announced.")
    about: str = Field(description="The key of the operation announced.")
    url: str
    secret_env: str
    body: dict


@register
class NotifySubscriber(ActionDefinition):
    name = NAME
    schema: ClassVar[type[BaseModel]] = NotificationData
    identity_fields = ("subscription", "change", "event", "operation")
    normalisers = {
        "subscription": keys.whole_number,
        "change": keys.whole_number,
        "event": keys.identifier,
        "operation": keys.whole_number,
    }
    fingerprint_fields = ("subscription", "change", "event", "operation")
    summary = "{event} of {about} to {subscription_name}"
    submittable = False
    external = True
    honours_idempotency_keys = True
    # Never lost: a receiver down for hours still gets it (50 tries, backing off to up to 10 minutes
    # apart, full jitter: about four hours); past them it waits for a person, who replays it.
    max_attempts = 50
    backoff_base_seconds = 2.0
    backoff_cap_seconds = 600.0
    deadline = timedelta(days=2)
    settle_after = timedelta(seconds=30)
    payload_retention = timedelta(days=7)
    key_retention = timedelta(days=30)

    def destination_label(self) -> str:
        return "subscribers' receivers"  # each subscription's own URL: no one system

    # No breaker (``limits``): every subscription's receiver is this one action's destination, so one
    # workspace's broken receiver would pause every workspace's notifications. Each backs off alone.

    def lookup(self, operation) -> Absent:
        """A receiver cannot be asked what it took; it deduplicates by webhook-id instead, so a try
        that may have reached it (a worker killed mid-call) is sent again under the same id."""
        return Absent()

    def perform(self, operation) -> Success:
        data = operation.payload
        # Checked again at each send, as a source's secret is at each delivery: a workspace created
        # since the subscription was saved may own the name (and its secret) now.
        if problem := secret_names.name_problem(operation.workspace, data["secret_env"]):
            raise PermanentError(f"{problem}: the notification is not signed with it (rename it: docs/integrations.md)")
        secret = os.environ.get(data["secret_env"], "")
        if not secret:
            raise PermanentError(f"{data['secret_env']} is not set: the notification cannot be signed")
        body = json.dumps(data["body"], separators=(",", ":"), ensure_ascii=False).encode()
        now = timezone.now()
        try:
            if not secret.startswith("whsec_"):
                raise ValueError("no whsec_ prefix")
            signature = Webhook(secret).sign(operation.key, now, body)
        except (ValueError, EmptyWebhookSecretError):
            raise PermanentError(f"{data['secret_env']} does not hold a whsec_ secret (whsec_ and base64)") from None
        headers = {
            "Content-Type": "application/json",
            "webhook-id": operation.key,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature,
        }
        response = http.send("POST", data["url"], content=body, headers=headers)
        return Success(result={"status": response.status_code})
