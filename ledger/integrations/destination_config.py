"""A configured destination (``ledger.models.Destination``) as plain values, as its HTTP actions
call it: where, with which credential (read from the environment at each call), how long to wait,
and what of it changes a call rather than only paces it. A pool thread reads it without the database.
"""

import base64
import os
from dataclasses import dataclass

import httpx

from ledger.models import Destination
from ledger.outcomes import PermanentError

# A destination's fields that pace its calls rather than change them.
LIMITS = ("rate_limit_per_second", "max_concurrency", "breaker_threshold", "breaker_cooldown_seconds")
# And those that change neither: where its refusals hold the vendor's code changes how they read.
NOT_THE_CALL = (*LIMITS, "error_code")


class CredentialMissing(PermanentError):
    """The destination's credential is not in the environment: nothing was sent."""


@dataclass(frozen=True)
class DestinationConfig:
    """A destination's row as plain values (a pool thread reads it without the database)."""

    slug: str
    base_url: str
    auth: str
    auth_header: str
    secret_env: str
    connect_timeout_seconds: float
    timeout_seconds: float
    idempotency_header: str
    idempotency_key_retention_seconds: int | None
    rate_limit_per_second: float | None
    max_concurrency: int
    breaker_threshold: int | None
    breaker_cooldown_seconds: int
    # Where its refusals' JSON bodies hold the vendor's error code (``ledger.actions.answers``).
    error_code: str

    @classmethod
    def of(cls, row: Destination) -> "DestinationConfig":
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + "/" + path.lstrip("/")

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout_seconds, connect=self.connect_timeout_seconds)

    def auth_headers(self) -> dict[str, str]:
        """The credential's header, read from the environment now (a rotated secret applies to the
        next call); ``CredentialMissing`` when the variable is empty."""
        if self.auth == Destination.Auth.NONE:
            return {}
        secret = os.environ.get(self.secret_env, "")
        if not secret:
            raise CredentialMissing(f"the credential of destination {self.slug} is missing: set {self.secret_env}")
        if self.auth == Destination.Auth.BEARER:
            return {"Authorization": f"Bearer {secret}"}
        if self.auth == Destination.Auth.BASIC:
            return {"Authorization": "Basic " + base64.b64encode(secret.encode()).decode()}
        return {self.auth_header: secret}

    def secret_values(self) -> list[str]:
        """The credential and the forms it travels in (for basic auth, each half and the encoding)."""
        secret = os.environ.get(self.secret_env, "") if self.auth != Destination.Auth.NONE else ""
        if not secret:
            return []
        values = [secret]
        if self.auth == Destination.Auth.BASIC:
            values += [part for part in secret.split(":", 1) if part]
            values.append(base64.b64encode(secret.encode()).decode())
        return values

    def described(self) -> dict:
        """What changes what a call does (never the secret, only where it is read from); not the
        limits, which change only how fast calls go (so tuning one asks no replay to confirm)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name not in NOT_THE_CALL}
