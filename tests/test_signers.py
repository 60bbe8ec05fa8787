"""The senders of tests/signers.py sign as their schemes are published: each signature is checked
against the algorithm written out here, so a signer that signs the wrong bytes, with the wrong key or
in the wrong form is caught before a server test trusts it."""

import base64
import hashlib
import hmac
import json
import shutil
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tests import signers

# Non-ASCII on purpose: the body must be signed byte for byte as UTF-8, whichever language signs it.
BODY = json.dumps(
    {"type": "invoice.paid", "data": {"object": {"customer": "cus_Ünïcødé €", "id": "in_1"}}}, ensure_ascii=False
).encode()
KEY = bytes(range(24))
WHSEC = "whsec_" + base64.b64encode(KEY).decode()


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def test_body_is_utf8_beyond_ascii():
    assert "Ü".encode() in BODY
    assert "€".encode() in BODY


def test_standard_webhooks_signs_id_timestamp_and_body_with_the_decoded_key():
    at = datetime(2026, 3, 1, 12, 30, 45, 900_000, tzinfo=UTC)
    headers = signers.standard_webhooks(WHSEC, "msg_2abc", BODY, at)

    timestamp = "1772368245"  # whole seconds, floored
    assert int(timestamp) == int(at.timestamp())
    expected = base64.b64encode(hmac_sha256(KEY, b"msg_2abc." + timestamp.encode() + b"." + BODY)).decode()
    assert headers == {
        "webhook-id": "msg_2abc",
        "webhook-timestamp": timestamp,
        "webhook-signature": f"v1,{expected}",
    }


def test_standard_webhooks_matches_the_specifications_example():
    # The Standard Webhooks specification's example (secret, id, timestamp, payload and signature).
    at = datetime.fromtimestamp(1614265330, UTC)
    headers = signers.standard_webhooks(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", b'{"test": 2432232314}', at
    )
    assert headers["webhook-signature"] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_standard_webhooks_naive_and_other_zones_are_the_same_instant():
    at = datetime(2026, 3, 1, 12, 30, 45, tzinfo=UTC)
    paris = at.astimezone(timezone(timedelta(hours=1)))
    assert (
        signers.standard_webhooks(WHSEC, "m", BODY, at)
        == signers.standard_webhooks(WHSEC, "m", BODY, at.replace(tzinfo=None))
        == signers.standard_webhooks(WHSEC, "m", BODY, paris)
    )


def test_standard_webhooks_the_library_verifies_its_headers_and_refuses_another_key():
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    headers = signers.standard_webhooks(WHSEC, "msg_1", BODY, datetime.now(UTC))
    assert Webhook(WHSEC).verify(BODY, headers) == json.loads(BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + base64.b64encode(b"another key 24 bytes long").decode()).verify(BODY, headers)


@signers.needs_node
def test_github_is_sha256_hex_hmac_of_the_raw_body():
    headers = signers.github("It's a Secret to Everybody", BODY, event="issues", delivery="72d3162e-cc78")

    expected = hmac.new(b"It's a Secret to Everybody", BODY, hashlib.sha256).hexdigest()
    assert headers == {
        "X-Hub-Signature-256": f"sha256={expected}",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "72d3162e-cc78",
        "Content-Type": "application/json",
    }


@signers.needs_node
def test_github_matches_githubs_published_example():
    # docs.github.com, "Validating webhook deliveries": secret and payload and the signature they give.
    headers = signers.github("It's a Secret to Everybody", b"Hello, World!", event="ping", delivery="d")
    assert headers["X-Hub-Signature-256"] == "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


@signers.needs_node
def test_stripe_is_t_and_v1_hex_hmac_of_timestamp_dot_body_with_the_secret_as_given():
    secret = "whsec_" + base64.b64encode(KEY).decode()  # Stripe's secrets look like this, and are not decoded
    headers = signers.stripe(secret, BODY, 1772368245)

    expected = hmac.new(secret.encode(), b"1772368245." + BODY, hashlib.sha256).hexdigest()
    assert headers == {"Stripe-Signature": f"t=1772368245,v1={expected}"}


@signers.needs_node
def test_stripe_refuses_a_timestamp_it_would_replace_by_now():
    for timestamp in (0, -1, 1772368245.5, "1772368245", True):
        with pytest.raises(ValueError, match="timestamp"):
            signers.stripe("whsec_x", BODY, timestamp)


@signers.needs_node
def test_npm_signers_without_node_modules_name_the_make_target(tmp_path, monkeypatch):
    shutil.copy(signers.ROOT / "package-lock.json", tmp_path / "package-lock.json")
    monkeypatch.setattr(signers, "ROOT", tmp_path)
    with pytest.raises(signers.SignerUnavailable, match="run `make node_modules`") as raised:
        signers.github("s", BODY, event="ping", delivery="d")
    assert "@octokit/webhooks-methods" in str(raised.value)
    assert "not installed" in str(raised.value)
    with pytest.raises(signers.SignerUnavailable, match="run `make node_modules`"):
        signers.stripe("s", BODY, 1772368245)


@signers.needs_node
def test_npm_signers_with_other_versions_than_the_lock_name_the_make_target(tmp_path, monkeypatch):
    shutil.copy(signers.ROOT / "package-lock.json", tmp_path / "package-lock.json")
    for name in signers.NODE_PACKAGES:
        (tmp_path / "node_modules" / name).mkdir(parents=True)
        (tmp_path / "node_modules" / name / "package.json").write_text('{"version": "0.0.1"}')
    monkeypatch.setattr(signers, "ROOT", tmp_path)
    with pytest.raises(signers.SignerUnavailable, match="version 0.0.1 is installed.*make node_modules"):
        signers.github("s", BODY, event="ping", delivery="d")


def test_npm_signers_without_node_fail_rather_than_sign(monkeypatch):
    monkeypatch.setattr(signers.shutil, "which", lambda name: None)
    with pytest.raises(signers.SignerUnavailable, match="no `node` on PATH"):
        signers.github("s", BODY, event="ping", delivery="d")
