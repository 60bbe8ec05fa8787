"""Keys and fingerprints are pure functions of the data: stable, collision-free, transport-blind."""

import hashlib
import itertools
import json

import pytest

from ledger.actions import get_action
from ledger.keys import build_key, canonical_json, fingerprint
from tests.conftest import R42

IDENTITY = ("request_id", "version")
FINGERPRINT = ("request_id", "version", "title", "owner")


def key_for(request_id, version=3, workspace="demo", action="prepare-brief"):
    return build_key(workspace, action, [("request_id", request_id), ("version", version)])


def schema_data(**changes):
    """The data as prepare-brief's schema hands it to intake (validated, trimmed)."""
    return get_action("prepare-brief").schema.model_validate(R42 | changes).model_dump(mode="json")


# --- keys -----------------------------------------------------------------------------------------


def test_it_builds_the_seed_key_for_r42():
    """The seed's R-42 example: workspace, request id, v<version>, action."""
    assert key_for("R-42", 3) == "demo:R-42:v3:prepare-brief"


def test_it_gives_each_version_its_own_key():
    assert key_for("R-42", 4) == "demo:R-42:v4:prepare-brief"
    assert key_for("R-42", 3) != key_for("R-42", 4)


def test_it_percent_encodes_a_colon_so_a_request_id_cannot_forge_another_key():
    """'R-42:v3' with version 1 must not look like request 'R-42' at version 3 (or anything else)."""
    forged = key_for("R-42:v3:prepare-brief", 1)
    assert forged == "demo:R-42%3Av3%3Aprepare-brief:v1:prepare-brief"
    assert forged.count(":") == 3
    assert key_for("R:1") == "demo:R%3A1:v3:prepare-brief"


def test_it_percent_encodes_a_percent_sign_so_an_encoded_colon_cannot_collide():
    """The literal text 'R%3A1' and the id 'R:1' are different requests and keep different keys."""
    assert key_for("R%3A1") == "demo:R%253A1:v3:prepare-brief"
    assert key_for("R%3A1") != key_for("R:1")


def test_it_never_gives_two_different_identities_the_same_key():
    tricky = ["R", "R:1", "R%3A1", "R%1", "R:v1", "1:v1", "R/1", "R 1", "R+1", "v1", ":", "%", "%25", "é"]
    keys = {}
    for request_id, version in itertools.product(tricky, [1, 3, 11]):
        key = key_for(request_id, version)
        assert key not in keys, f"{(request_id, version)} and {keys[key]} share {key}"
        keys[key] = (request_id, version)


def test_it_normalises_unicode_to_nfc_in_keys():
    """'é' typed as one code point or as 'e' + combining accent is the same request."""
    composed, decomposed = "Caf\u00e9-1", "Cafe\u0301-1"
    assert composed != decomposed
    assert key_for(composed) == key_for(decomposed)


# --- fingerprints ---------------------------------------------------------------------------------


def test_it_fingerprints_with_sha256_of_the_canonical_business_fields():
    expected = hashlib.sha256(canonical_json({f: R42[f] for f in FINGERPRINT}).encode()).hexdigest()
    assert fingerprint(R42, FINGERPRINT) == expected
    assert len(expected) == 64


def test_it_excludes_transport_metadata_from_the_fingerprint():
    """Delivery id, correlation id and arrival time describe the transport, not the business action."""
    with_transport = R42 | {"delivery_id": "delivery-9", "correlation_id": "c-1", "transport": "http"}
    assert fingerprint(with_transport, FINGERPRINT) == fingerprint(R42, FINGERPRINT)


def test_it_ignores_key_order():
    reversed_order = dict(reversed(list(R42.items())))
    assert list(reversed_order) != list(R42)
    assert fingerprint(reversed_order, FINGERPRINT) == fingerprint(R42, FINGERPRINT)


def test_it_normalises_unicode_to_nfc_in_fingerprints():
    assert fingerprint(R42 | {"title": "Caf\u00e9 review"}, FINGERPRINT) == fingerprint(
        R42 | {"title": "Cafe\u0301 review"}, FINGERPRINT
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_id", "R-43"),
        ("version", 4),
        ("title", "Another title"),
        ("owner", "finance"),
    ],
)
def test_it_changes_the_fingerprint_when_any_business_field_changes(field, value):
    assert fingerprint(R42 | {field: value}, FINGERPRINT) != fingerprint(R42, FINGERPRINT)


def test_it_tells_an_integer_from_the_same_digits_as_text():
    assert fingerprint(R42 | {"version": "3"}, FINGERPRINT) != fingerprint(R42, FINGERPRINT)


def test_it_fingerprints_a_title_trimmed_by_the_schema_like_the_plain_title():
    """prepare-brief's schema trims the title, so surrounding white space is not a changed payload."""
    padded = schema_data(title="  Review renewal options \n")
    assert padded["title"] == "Review renewal options"
    assert fingerprint(padded, FINGERPRINT) == fingerprint(schema_data(), FINGERPRINT)


def test_it_keeps_the_action_recipe_of_prepare_brief():
    action = get_action("prepare-brief")
    assert action.identity_fields == IDENTITY
    assert action.fingerprint_fields == FINGERPRINT


# --- canonical JSON -------------------------------------------------------------------------------


def test_it_writes_canonical_json_with_sorted_keys_and_no_spaces():
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'


def test_it_keeps_non_ascii_text_as_nfc_text():
    assert canonical_json({"t": "Cafe\u0301"}) == '{"t":"Caf\u00e9"}'
    assert json.loads(canonical_json({"t": "Cafe\u0301"})) == {"t": "Caf\u00e9"}


def test_it_normalises_keys_as_well_as_values():
    assert canonical_json({"Cafe\u0301": 1}) == canonical_json({"Caf\u00e9": 1})


def test_it_refuses_nan():
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"x": float("nan")})
