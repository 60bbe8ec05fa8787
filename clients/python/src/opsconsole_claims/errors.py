"""What the client raises, and what a caller raises to say how its action failed.

The client never turns an error into "go ahead": the service out of reach is `ServiceUnavailable`, a
refusal of the request is `Refused`, a lease taken from this claim is `ClaimLost`. The deferring answers
(in progress, retry later, held, a person must decide) are not errors: they are a `Claim` whose
`should_act` is False.
"""

from __future__ import annotations

from typing import Any


class ClaimError(Exception):
    """Base of everything this client raises."""


class ServiceUnavailable(ClaimError):
    """opsconsole did not answer (connection error, timeout, 5xx) after every retry: nothing is
    known about the claim or the report, so do not act."""

    def __init__(
        self, message: str, *, attempts: int, status_code: int | None = None, retry_after: float | None = None
    ):
        super().__init__(message)
        self.attempts = attempts
        self.status_code = status_code  # the last answer's, None when none came
        self.retry_after = retry_after  # the last answer's Retry-After, in seconds


class Refused(ClaimError):
    """opsconsole refused the request itself (401, 404, 409 blocked, 422, ...): sending it again
    the same way gets the same answer."""

    def __init__(self, http_status: int, body: dict[str, Any]):
        self.http_status = http_status
        self.body = body
        self.status = str(body.get("status", ""))  # "blocked", "unauthorized", "outcome_conflict", ...
        self.reason = str(body.get("reason", ""))  # for "blocked": "invalid_input", "payload_conflict", ...
        self.errors = body.get("errors") or []
        self.message = str(body.get("message") or body.get("detail") or "")
        super().__init__(self._describe())

    def _describe(self) -> str:
        what = f"{self.status} ({self.reason})" if self.reason else self.status or "refused"
        detail = self.message or (str(self.errors) if self.errors else "")
        return f"{self.http_status} {what}" + (f": {detail}" if detail else "")


class ClaimLost(ClaimError):
    """This claim's token is no longer the operation's (its lease expired, or the operation was
    decided meanwhile): the server refused it as stale and recorded nothing. Once a lease expires
    unreported the operation is `unknown` until a lookup or a person decides."""

    def __init__(self, key: str, message: str = ""):
        self.key = key
        super().__init__(
            f"the claim of {key} was lost (its token is stale): nothing this claim reports is recorded"
            + (f"; {message}" if message else "")
        )


class Permanent(Exception):
    """Raise it (or an exception of a class derived from it) inside a claim to report the failure as
    permanent: retrying would not help. `raise Permanent("card declined") from error` wraps another."""


class Ambiguous(Exception):
    """Raise it (or derive from it) inside a claim when the effect may have happened: the client
    reports `unknown`, whether or not `claim.acted()` was called."""
