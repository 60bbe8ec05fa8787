"""Every route this client calls, in one table: its method, its path template, and the fields of the
body and query it may send. The client's methods build their requests from here, and the
repository's tests/connectors/test_python_client_openapi.py checks each one against the app's
OpenAPI document, so a route renamed or a field dropped on the server fails there, not in a flow.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

PREFIX = "/api/v1"


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # as the OpenAPI document writes it: "/api/v1/operations/{key}/approve"
    body: tuple[str, ...] = ()  # the JSON body's fields this client may send
    query: tuple[str, ...] = ()  # the query's parameters this client may send

    def path(self, **segments: str | int) -> str:
        """The template filled in. A key holds ':' and may hold '/', '?', '#', '%' or spaces: every
        value travels percent-encoded as one path segment."""
        return self.template.format(**{name: quote(str(value), safe="") for name, value in segments.items()})


ENVELOPE = ("action", "data", "delivery_id", "correlation_id", "occurred_at")

ROUTES: dict[str, Route] = {
    # Submitting work (docs/api-for-flows.md, Tokens and scopes: `events`)
    "submit_event": Route("POST", f"{PREFIX}/events", body=ENVELOPE),
    "submit_batch": Route("POST", f"{PREFIX}/events/batch", body=("events",)),
    # Claims (docs/claims.md: `claims`)
    "claim": Route("POST", f"{PREFIX}/claims", body=(*ENVELOPE, "lease_seconds")),
    "claim_by_key": Route("POST", f"{PREFIX}/claims", body=("key", "lease_seconds")),
    "claim_batch": Route("POST", f"{PREFIX}/claims/batch", body=("claims",)),
    "heartbeat": Route("POST", f"{PREFIX}/claims/{{key}}/heartbeat", body=("token", "lease_seconds")),
    "outcome": Route(
        "POST",
        f"{PREFIX}/claims/{{key}}/outcome",
        body=("token", "outcome", "external_id", "result", "category", "error", "retry_after"),
    ),
    "due": Route("GET", f"{PREFIX}/claims/due", query=("action", "limit", "cursor")),
    # Reading (`read`)
    "operations": Route(
        "GET", f"{PREFIX}/operations", query=("state", "action", "destination", "age", "q", "limit", "cursor")
    ),
    "operation": Route("GET", f"{PREFIX}/operations/{{key}}"),
    # Deciding (`approve`: approve, reject; `operate`: the others)
    "approve": Route("POST", f"{PREFIX}/operations/{{key}}/approve", body=("fingerprint", "reason")),
    "reject": Route("POST", f"{PREFIX}/operations/{{key}}/reject", body=("fingerprint", "reason")),
    "replay": Route(
        "POST", f"{PREFIX}/operations/{{key}}/replay", body=("reason", "accept_config_change", "force_unknown")
    ),
    "resolve": Route("POST", f"{PREFIX}/operations/{{key}}/resolve", body=("external_id", "note")),
    "cancel": Route("POST", f"{PREFIX}/operations/{{key}}/cancel", body=("reason",)),
    "take": Route("POST", f"{PREFIX}/operations/{{key}}/take", body=("take_over",)),
    "release": Route("POST", f"{PREFIX}/operations/{{key}}/release"),
    "apply_conflict": Route("POST", f"{PREFIX}/conflicts/{{conflict_id}}/apply", body=("reason",)),
    "dismiss_conflict": Route("POST", f"{PREFIX}/conflicts/{{conflict_id}}/dismiss", body=("reason",)),
    # Pauses (`read` to list; `operate` to pause and resume)
    "pauses": Route("GET", f"{PREFIX}/pauses"),
    "pause": Route("POST", f"{PREFIX}/pauses", body=("scope", "action", "destination", "reason")),
    "resume": Route("DELETE", f"{PREFIX}/pauses/{{pause_id}}"),
}
