"""What the notification tests share: a subscription of the demo workspace to a receiver of the
test's own (``tests.receiver``), its whsec_ secret set in the environment, and reading back what the
receiver took, verified as a Standard Webhooks receiver verifies it."""

import base64
import json

from standardwebhooks.webhooks import Webhook

from ledger.integrations.subscriptions import save_subscription
from ledger.models import Subscription
from ledger.models.subscriptions import EVENTS

SECRET_ENV = "OPSCONSOLE_SOURCE_DEMO_NOTIFY"
SECRET = "whsec_" + base64.b64encode(b"a notification secret of 32 b..").decode()


def subscribe(workspace, url: str, *, events=EVENTS, name: str = "flows", active: bool = True) -> Subscription:
    return save_subscription(
        Subscription(
            workspace=workspace, name=name, url=url, events=list(events), secret_env=SECRET_ENV, active=active
        ),
        actor="test",
    )


def verified(received, secret: str = SECRET) -> dict:
    """The body of a notification the receiver took, once its signature is verified (raises if not)."""
    headers = {name: received.headers[name] for name in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    Webhook(secret).verify(received.body, headers)
    return json.loads(received.body)
