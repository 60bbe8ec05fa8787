"""Checking a signed webhook the way its sender signs it, on the raw bytes of its body, before
anything in it is read: Standard Webhooks (the ``standardwebhooks`` library), GitHub
(``X-Hub-Signature-256``) and Stripe (``Stripe-Signature: t=…,v1=…``). Each answers what the
sender says about the delivery (its id, when it was signed, its event type) or raises ``Refused``
with the reason the endpoint answers 401 with.
"""

import hashlib
import hmac
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from ledger.models import SourceScheme


class Refused(Exception):
    """The delivery is not the sender's: ``reason`` is the API's, ``message`` says what to fix."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


MISSING_SIGNATURE, BAD_SIGNATURE, STALE_TIMESTAMP = "missing_signature", "bad_signature", "stale_timestamp"


@dataclass(frozen=True)
class Signed:
    """What a verified delivery's sender says of it."""

    delivery_id: str
    signed_at: datetime | None
    event: str  # the scheme's event type ("" when the sender names none)
    occurred_at: datetime | None = None  # when the event itself happened, where the body says (``described``)


def verify(scheme: str, body: bytes, headers, secrets: list[str], *, tolerance: int, now: datetime) -> Signed:
    """What the headers of a delivery of ``body`` whose signature one of ``secrets`` checks say of
    it; what its body says is ``described`` once the body is decoded."""
    check = {
        SourceScheme.STANDARD_WEBHOOKS: _standard_webhooks,
        SourceScheme.GITHUB: _github,
        SourceScheme.STRIPE: _stripe,
    }[SourceScheme(scheme)]
    return check(body, headers, secrets, tolerance=tolerance, now=now)


def _standard_webhooks(body: bytes, headers, secrets, *, tolerance, now) -> Signed:
    delivery_id, stamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "")
    offered = headers.get("webhook-signature", "")
    if not (delivery_id and stamp and offered):
        raise Refused(MISSING_SIGNATURE, "webhook-id, webhook-timestamp and webhook-signature are required")
    signed_at = _timestamp(stamp, tolerance=tolerance, now=now)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(BAD_SIGNATURE, "the body is not UTF-8, which a Standard Webhooks sender signs") from None
    # The library signs (its `sign`); the time window is the source's (its `verify` would hold
    # every source to its own fixed five minutes). The header lists signatures separated by spaces.
    candidates = [_ascii(part) for part in offered.split(" ") if part]
    for secret in secrets:
        expected = Webhook(secret).sign(delivery_id, signed_at, text).encode()
        if any(hmac.compare_digest(expected, candidate) for candidate in candidates):
            # The spec's payload carries the event's own time as `timestamp` (RFC 3339).
            return Signed(delivery_id, signed_at, event="")
    raise Refused(BAD_SIGNATURE, "no signature in webhook-signature matches this source's secrets")


def challenge_response(scheme: str, headers, secrets: list[str]) -> str | None:
    """The answer to an endpoint verification challenge, for a scheme that has them (Standard
    Webhooks: ``webhook-challenge`` in, ``webhook-challenge-response`` out, keyed by the current
    secret); None when the request is no challenge."""
    challenge = headers.get("webhook-challenge", "")
    if scheme != SourceScheme.STANDARD_WEBHOOKS or not challenge:
        return None
    return Webhook(secrets[0]).endpoint_verification_response(challenge)


def _github(body: bytes, headers, secrets, *, tolerance, now) -> Signed:
    signature = headers.get("X-Hub-Signature-256", "")
    if not signature:
        raise Refused(MISSING_SIGNATURE, "X-Hub-Signature-256 is required")
    for secret in secrets:
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected.encode(), _ascii(signature)):
            # GitHub signs no time: a redelivery after the key window is refused by the id's arrival
            # time alone (intake's stale check needs occurred_at, which GitHub does not send).
            return Signed(headers.get("X-GitHub-Delivery", ""), None, headers.get("X-GitHub-Event", ""))
    raise Refused(BAD_SIGNATURE, "X-Hub-Signature-256 does not match this source's secrets")


def _stripe(body: bytes, headers, secrets, *, tolerance, now) -> Signed:
    parts = [part.split("=", 1) for part in headers.get("Stripe-Signature", "").split(",") if "=" in part]
    stamps = [value for name, value in parts if name.strip() == "t"]
    signatures = [value.strip() for name, value in parts if name.strip() == "v1"]
    if not stamps or not signatures:
        raise Refused(MISSING_SIGNATURE, "Stripe-Signature with t= and v1= is required")
    signed_at = _timestamp(stamps[0].strip(), tolerance=tolerance, now=now)
    payload = stamps[0].strip().encode() + b"." + body
    for secret in secrets:
        expected = hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest().encode()
        if any(hmac.compare_digest(expected, _ascii(signature)) for signature in signatures):
            # An event's `created` (Unix seconds) is when Stripe made it, kept across redeliveries.
            return Signed("", signed_at, event="")
    raise Refused(BAD_SIGNATURE, "no v1 signature in Stripe-Signature matches this source's secrets")


def _timestamp(stamp: str, *, tolerance: int, now: datetime) -> datetime:
    if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12:
        raise Refused(BAD_SIGNATURE, "the signed timestamp must be whole seconds since 1970")
    # Compared as numbers first: a time beyond year 9999 is no datetime at all.
    if abs(int(stamp) - now.timestamp()) > tolerance:
        raise Refused(
            STALE_TIMESTAMP,
            f"signed at {stamp} (Unix seconds), more than {tolerance} s from now: "
            "a replay, or the sender's clock is off",
        )
    return datetime.fromtimestamp(int(stamp), UTC)


def _ascii(text: str) -> bytes:
    """A signature as sent, as bytes to compare (a non-ASCII one simply matches nothing)."""
    return text.encode("utf-8", "surrogateescape")


def usable_secret(scheme: str, secret: str) -> bool:
    """Whether ``secret`` can check signatures of ``scheme`` (a Standard Webhooks secret is base64,
    after an optional ``whsec_``; any non-empty text is a GitHub or Stripe secret)."""
    if not secret:
        return False
    if scheme != SourceScheme.STANDARD_WEBHOOKS:
        return True
    try:
        Webhook(secret)
    except Exception:  # noqa: BLE001  the library's several errors (binascii, its own) all mean "not usable"
        return False
    return True


def described(scheme: str, signed: Signed, document) -> Signed:
    """``signed`` with what the verified, decoded body says where the scheme puts it there: the
    event type (both), Stripe's event id and ``created``, a Standard Webhooks payload's
    ``timestamp`` (RFC 3339). The event's own time stays the same when the sender delivers it
    again, unlike the signature's (so an old one can be found stale)."""
    if scheme == SourceScheme.GITHUB or not isinstance(document, dict):
        return signed
    event = _text(document.get("type"))
    if scheme == SourceScheme.STRIPE:
        return replace(
            signed, delivery_id=_text(document.get("id")), event=event, occurred_at=_unix(document.get("created"))
        )
    return replace(signed, event=event, occurred_at=_iso(document.get("timestamp")))


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _iso(value) -> datetime | None:
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


def _unix(value) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 10**11:
        return None
    return datetime.fromtimestamp(value, UTC)
