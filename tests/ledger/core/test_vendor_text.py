"""What a destination said is masked after decoding, before it is stored: the
destination's credential in every form a careless vendor echoes it in (``tests.credential_forms``:
base64, base64url and base32, percent-encoded, hex however separated, UTF-16 hex, ``Bearer``/``Basic``,
escaped in JSON, in JSON in JSON, ``\\x`` or HTML entities, split in short groups) and any run of 8
characters or more of one of them; the action's sensitive values wherever they appear decoded.
What is masked reads as ``privacy.MASK``; the rest is kept as it came."""

import base64
import json
from urllib.parse import quote

import pytest

from ledger.core import privacy, vendor_text
from ledger.models import Operation
from ledger.outcomes import Answer, PermanentError
from tests.credential_forms import escaped, forms_of, leaks

SECRET = "sk_live_51Hq?Zx+k9~Tq=W8dR>>"
FORMS = forms_of(SECRET)


@pytest.fixture
def echoing(scripted_action):
    """An action whose destination's credential is ``SECRET``, and an operation of it."""
    action = scripted_action(secret_values=lambda self: [SECRET], sensitive_fields=("customer",))
    return action, Operation(action=action.name, payload={"request_id": "R-1", "customer": "cus_Ann0001"})


def leaked(text: str) -> list[str]:
    return leaks(text, SECRET)


def in_a_json_string(form: str) -> str:
    """``form`` as a vendor writes it inside a JSON string: as it is where that is valid JSON (its
    ``\\u`` escapes read as JSON's), else escaped (a ``\\x`` escape's backslash doubled)."""
    try:
        json.loads(f'"{form}"')
    except ValueError:
        return json.dumps(form, ensure_ascii=False)[1:-1]
    return form


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_each_form_of_the_credential_is_masked_in_words(echoing, form):
    action, operation = echoing

    kept = privacy.scrubbed_text(f"refused {form} today", operation, action)

    assert form not in kept
    assert not leaked(kept), kept
    assert kept.startswith("refused ")
    assert kept.endswith(" today")
    assert privacy.MASK in kept


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_each_form_of_the_credential_is_masked_in_a_json_body_that_stays_json(echoing, form):
    action, operation = echoing
    body = '{"error": {"code": "bad_key", "message": "refused ' + in_a_json_string(form) + '"}, "id": "req_1"}'
    refused = PermanentError("HTTP 401", answer=Answer(status=401, body=body, code="bad_key"))

    kept = privacy.scrub_failure(refused, operation, action).answer.body

    decoded = json.loads(kept)
    assert decoded["error"]["message"].startswith("refused ")
    assert privacy.MASK in decoded["error"]["message"]
    assert (decoded["error"]["code"], decoded["id"]) == ("bad_key", "req_1")
    assert not leaked(kept)
    assert not leaked(decoded["error"]["message"])


def test_a_json_escaped_credential_in_a_body_cut_at_the_bound_is_masked_too(echoing):
    """A cut body is no JSON any more: its escaped strings are still read decoded."""
    action, operation = echoing
    written = escaped(SECRET)
    body = '{"message": "refused ' + written + '", "more": "xxxx\n… [cut: 9,000 bytes in all, the first 4,096 kept]'
    refused = PermanentError("HTTP 400", answer=Answer(status=400, body=body))

    kept = privacy.scrub_failure(refused, operation, action).answer.body

    assert written not in kept
    assert not leaked(kept)
    assert kept.startswith('{"message": "refused ')
    assert kept.endswith("the first 4,096 kept]")


def test_every_part_of_an_answer_and_the_message_are_masked(echoing):
    action, operation = echoing
    answer = Answer(
        status=401,
        headers={"x-request-id": "req_" + FORMS["base64url unpadded"]},
        body=json.dumps({"detail": f"Bearer {SECRET}"}),
        code=SECRET[:12],
        said=f"key {FORMS['percent-encoded']} refused",
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
    body = '{"message": "no customer ' + escaped("cus_Ann0001") + '", "url": "/v1/customers/cus%5FAnn0001"}'
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


# --- the stricter pass for those who do not configure the destination --------------------------------

REFUSAL = {
    "error": {
        "code": "idempotency_key_in_use",
        "message": "Keys for idempotent requests can only be used with the same parameters",
        "doc_url": "https://vendor.example/docs/errors/idempotency_key_in_use",
        "request_id": "req_8Hq2Lx7Vb3Nm9Pk4Wz",
        "created": "2026-12-05T13:48:05Z",
        "IdempotencyKeyInUseError": "PascalCase and camelCaseWords are words",
        "base64url_unpadded_key": "v2/reports/2026/quarterly_summary_final",
    }
}


def test_the_stricter_pass_blanks_each_long_opaque_string_and_keeps_the_words():
    """Runs of 16 or more characters of the base64, base32 and hex alphabets that do not read as
    words (pieces of letters, with one short group of digits at most, between ``_``, ``-`` and
    ``/``) become ``MASK``; JSON stays JSON."""
    body = json.dumps(REFUSAL | {"echo": FORMS["base32"], "hex": "deadbeef" + "0123456789abcdef"})

    shown = json.loads(vendor_text.opaque_blanked(body))

    assert shown["error"] == REFUSAL["error"] | {"request_id": privacy.MASK}
    assert (shown["echo"], shown["hex"]) == (privacy.MASK, privacy.MASK)


@pytest.mark.parametrize(
    "form",
    [
        base64.b64encode(SECRET.encode()).decode()[::-1],  # a form masking does not know
        escaped("tok_9fK2mQ7xL4pR8sV1"),  # escaped in JSON
        quote("tok/9fK2mQ7xL4pR8sV1+ab==", safe=""),  # percent-encoded
    ],
    ids=["reversed base64", "json-escaped", "percent-encoded"],
)
def test_the_stricter_pass_reads_the_text_decoded_as_masking_does(form):
    shown = vendor_text.opaque_blanked(f'{{"said": "refused {form} today"}}')

    assert json.loads(shown) == {"said": f"refused {privacy.MASK} today"}


def test_the_stricter_pass_keeps_a_text_with_nothing_long_and_opaque_byte_for_byte():
    body = '{"error":{"code":"card_declined","message":"Caf\\u00e9 card ending 4242 declined (ref 9fK2mQ7xL4pR8)"}}'

    assert vendor_text.opaque_blanked(body) == body
