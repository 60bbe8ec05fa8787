"""What a destination said is masked after decoding, before it is stored (issue 37, finding 3): the
destination's credential in every common form it may be echoed in (base64 and base64url with and
without padding, percent-encoded, hex, ``Bearer``/``Basic``, ``\\u``-escaped in JSON) and any run of
8 characters or more of one of them; the action's sensitive values wherever they appear decoded.
What is masked reads as ``privacy.MASK``; the rest is kept as it came."""

import base64
import json
import re
from urllib.parse import quote

import pytest

from ledger.core import privacy
from ledger.models import Operation
from ledger.outcomes import Answer, PermanentError

SECRET = "sk_live_51Hq?Zx+k9~Tq=W8dR>>"
RAW = SECRET.encode()
B64 = base64.b64encode(RAW).decode()
B64URL = base64.urlsafe_b64encode(RAW).decode()
FORMS = {
    "as it is": SECRET,
    "upper case": SECRET.upper(),
    "bearer": f"Bearer {SECRET}",
    "basic of a pair": "Basic " + base64.b64encode(b"api:" + RAW).decode(),
    "basic with no password (Stripe)": "Basic " + base64.b64encode(RAW + b":").decode(),
    "base64": B64,
    "base64 unpadded": B64.rstrip("="),
    "base64url": B64URL,
    "base64url unpadded": B64URL.rstrip("="),
    "percent-encoded": quote(SECRET, safe=""),
    "percent-encoded, lower-case hex": quote(SECRET, safe="").lower(),
    "percent-encoded, only some characters": quote(SECRET, safe="~=?"),
    "form-encoded in a query": "https://vendor.example/v1?key=" + quote(SECRET, safe=""),
    "hex": RAW.hex(),
    "hex upper case": RAW.hex().upper(),
    "truncated": SECRET[:10] + "…",
    "a fragment from the middle": SECRET[6:16],
    "json-escaped": "".join(f"\\u{ord(char):04x}" for char in SECRET),
    "json-escaped base64": "".join(f"\\u{ord(char):04x}" for char in B64),
    "json-escaped plus in base64": B64.replace("+", "\\u002b"),
}


@pytest.fixture
def echoing(scripted_action):
    """An action whose destination's credential is ``SECRET``, and an operation of it."""
    action = scripted_action(secret_values=lambda self: [SECRET], sensitive_fields=("customer",))
    return action, Operation(action=action.name, payload={"request_id": "R-1", "customer": "cus_Ann0001"})


def runs_of_8(text: str) -> set[str]:
    return {text[i : i + 8].lower() for i in range(len(text) - 7)}


# Every run of 8 characters of each form the credential travels or is echoed in.
LEAKS = set().union(*(runs_of_8(form) for form in (SECRET, B64, B64URL, quote(SECRET, safe=""), RAW.hex())))


def leaked(text: str) -> set[str]:
    decoded = re.sub(r"\\u([0-9a-fA-F]{4})", lambda escape: chr(int(escape[1], 16)), text)
    return {run for run in LEAKS if run in text.lower() or run in decoded.lower()}


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_each_form_of_the_credential_is_masked_in_words(echoing, form):
    action, operation = echoing

    kept = privacy.scrubbed_text(f"refused {form} today", operation, action)

    assert form not in kept
    assert not leaked(kept), kept
    assert kept.startswith("refused ") and kept.endswith(" today") and privacy.MASK in kept


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_each_form_of_the_credential_is_masked_in_a_json_body_that_stays_json(echoing, form):
    action, operation = echoing
    body = '{"error": {"code": "bad_key", "message": "refused ' + form + '"}, "id": "req_1"}'
    refused = PermanentError("HTTP 401", answer=Answer(status=401, body=body, code="bad_key"))

    kept = privacy.scrub_failure(refused, operation, action).answer.body

    decoded = json.loads(kept)
    assert decoded["error"]["message"].startswith("refused ") and privacy.MASK in decoded["error"]["message"]
    assert (decoded["error"]["code"], decoded["id"]) == ("bad_key", "req_1")
    assert not leaked(kept) and not leaked(decoded["error"]["message"])


def test_a_json_escaped_credential_in_a_body_cut_at_the_bound_is_masked_too(echoing):
    """A cut body is no JSON any more: its escaped strings are still read decoded."""
    action, operation = echoing
    escaped = "".join(f"\\u{ord(char):04x}" for char in SECRET)
    body = '{"message": "refused ' + escaped + '", "more": "xxxx\n… [cut: 9,000 bytes in all, the first 4,096 kept]'
    refused = PermanentError("HTTP 400", answer=Answer(status=400, body=body))

    kept = privacy.scrub_failure(refused, operation, action).answer.body

    assert escaped not in kept and not leaked(kept)
    assert kept.startswith('{"message": "refused ') and kept.endswith("the first 4,096 kept]")


def test_every_part_of_an_answer_and_the_message_are_masked(echoing):
    action, operation = echoing
    answer = Answer(
        status=401,
        headers={"x-request-id": "req_" + B64URL.rstrip("=")},
        body=json.dumps({"detail": f"Bearer {SECRET}"}),
        code=SECRET[:12],
        said=f"key {quote(SECRET, safe='')} refused",
    )
    refused = PermanentError(f"HTTP 401 from vendor [{answer.code}]: {answer.said}", answer=answer)

    error = privacy.scrub_failure(refused, operation, action)

    kept = [error.message, *error.args, error.answer.body, error.answer.code, error.answer.said]
    kept += list(error.answer.headers.values())
    assert not any(leaked(text) for text in kept), kept
    assert error.answer.headers == {"x-request-id": f"req_{privacy.MASK}"}
    assert json.loads(error.answer.body) == {"detail": f"Bearer {privacy.MASK}"}
    assert error.message == f"HTTP 401 from vendor [{privacy.MASK}]: key {privacy.MASK} refused"


def test_a_sensitive_value_is_masked_where_it_is_json_escaped_or_percent_encoded(echoing):
    action, operation = echoing
    escaped = "".join(f"\\u{ord(char):04x}" for char in "cus_Ann0001")
    body = '{"message": "no customer ' + escaped + '", "url": "/v1/customers/cus%5FAnn0001"}'
    refused = PermanentError("HTTP 404", answer=Answer(status=404, body=body))

    kept = privacy.scrub_failure(refused, operation, action).answer.body

    assert json.loads(kept) == {"message": f"no customer {privacy.MASK}", "url": f"/v1/customers/{privacy.MASK}"}


def test_an_answer_that_holds_nothing_hidden_is_kept_byte_for_byte(echoing):
    action, operation = echoing
    body = '{"error":{"code":"card_declined","message":"Caf\\u00e9 card declined: sk_live keys only"}}'
    refused = PermanentError("HTTP 402", answer=Answer(status=402, body=body, said="Café card declined"))

    error = privacy.scrub_failure(refused, operation, action)

    assert (error.answer.body, error.answer.said) == (body, "Café card declined")


def test_a_run_shorter_than_8_characters_is_kept_and_a_short_credential_is_masked_whole(scripted_action):
    """Seven characters of a credential in the words (a common prefix, a last-four hint) are kept:
    masking every shorter run would mask ordinary words. A credential shorter than that is masked
    where it appears whole."""
    action = scripted_action(secret_values=lambda self: [SECRET, "pw1234"])
    operation = Operation(action=action.name, payload={})

    kept = privacy.scrubbed_text(f"key {SECRET[:7]}… ends in {SECRET[-4:]}; password pw1234", operation, action)

    assert kept == f"key {SECRET[:7]}… ends in {SECRET[-4:]}; password {privacy.MASK}"
