"""A configured action's schema `pattern`s cannot hold a worker: they run on
RE2, a linear-time engine, so `^(a+)+$` answers at once at any length; a pattern RE2 cannot compile
is refused when saved, saying where. Any token may send the text they match.
"""

import signal
from contextlib import contextmanager

import pytest
from django.core.management import CommandError

from ledger.models import HttpAction
from tests.ledger.integrations.test_configured_actions import ACTION, SCHEMA, apply, file_text


@contextmanager
def watchdog(seconds: int):
    """Fail, instead of hanging, when what runs inside is not done in ``seconds`` (what is under test
    takes milliseconds; without its bound it would take hours)."""

    def bark(signum, frame):
        raise AssertionError(f"still running after {seconds} s: nothing bounded it")

    previous = signal.signal(signal.SIGALRM, bark)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


CATASTROPHIC = "^(a+)+$"


def test_a_catastrophic_pattern_answers_at_once_through_the_api(api, tmp_path):
    """`^(a+)+$` took 3.35 s at 25 characters on a backtracking engine, doubling per character."""
    schema = SCHEMA | {"properties": SCHEMA["properties"] | {"note": {"type": "string", "pattern": CATASTROPHIC}}}
    apply(tmp_path, file_text(action=ACTION | {"schema": schema}))
    event = {"action": "notify-crm", "data": {"request_id": "R-1", "amount": 1, "note": "a" * 5000 + "!"}}

    with watchdog(20):
        response = api.post("/api/v1/events", event)

    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert error["field"] == "data.note"
    assert f"does not match {CATASTROPHIC!r}" in error["message"]
    assert api.post("/api/v1/events", event | {"data": event["data"] | {"note": "aaaa"}}).status_code == 201


def test_pattern_properties_run_on_the_same_engine(tmp_path, api):
    schema = SCHEMA | {"patternProperties": {"^(a+)+$": {"type": "integer"}}}
    apply(tmp_path, file_text(action=ACTION | {"schema": schema}))
    event = {"action": "notify-crm", "data": {"request_id": "R-1", "amount": 1, "a" * 5000 + "!": "text"}}

    with watchdog(20):
        response = api.post("/api/v1/events", event)

    assert response.status_code == 201, response.json()


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"properties": {"note": {"type": "string", "pattern": "^(a)\\1$"}}}, "schema.properties.note.pattern"),
        ({"properties": {"note": {"type": "string", "pattern": "^(?=a).*$"}}}, "schema.properties.note.pattern"),
        ({"patternProperties": {"^(?!x)": {"type": "string"}}}, "schema.patternProperties.^(?!x)"),
        (
            {"properties": {"items": {"type": "array", "items": {"type": "string", "pattern": "(?<=a)b"}}}},
            "schema.properties.items.items.pattern",
        ),
    ],
)
def test_a_pattern_the_linear_engine_cannot_run_is_refused_when_saved_saying_where(tmp_path, db, schema, where):
    action = ACTION | {"schema": SCHEMA | {"properties": SCHEMA["properties"] | schema.get("properties", {})}}
    if "patternProperties" in schema:
        action["schema"]["patternProperties"] = schema["patternProperties"]

    with pytest.raises(CommandError) as refused:
        apply(tmp_path, file_text(action=action))

    assert f"http_actions[0].{where}: " in str(refused.value)
    assert "RE2" in str(refused.value)
    assert not HttpAction.objects.exists()
