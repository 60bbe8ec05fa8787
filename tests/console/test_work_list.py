"""The queue as a work list (issue 27, item 7): states as people say them, and a summary of each
operation from its action's template, never a sensitive value."""

import re

import pytest
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from ledger.actions import base, summaries
from ledger.core import outbound
from ledger.intake.submit import submit_event
from ledger.models import Destination, HttpAction, Operation
from ledger.states import LABELS, State
from tests.ledger.conftest import submit_brief

REFUND = {"request_id": "R-7", "version": 1, "customer_id": "C-1001", "amount_cents": 4500, "currency": "EUR"}


def rows(response) -> list[str]:
    """Each row of the list as its text, tags and runs of spaces removed."""
    html = response.content.decode()
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in body.split("</tr>")[:-1]]


def to_review(operation: Operation, **fields) -> Operation:
    Operation.objects.filter(pk=operation.pk).update(state="needs_review", **fields)
    return operation


def test_every_state_has_a_label_people_read():
    assert set(LABELS) == set(State)
    assert LABELS[State.NEEDS_REVIEW] == "Needs review"


def test_the_queue_shows_each_operation_summary_and_its_state_in_words(client, login, workspace):
    to_review(submit_brief(workspace))
    login("viewer")

    [row] = rows(client.get("/console/"))

    assert row.startswith("R-42 v3 · Review renewal options demo:R-42:v3:prepare-brief Needs review prepare-brief")
    assert "needs_review" not in row


def test_the_state_tabs_and_the_state_filter_read_as_words(client, login, workspace):
    to_review(submit_brief(workspace))
    login("viewer")

    html = client.get("/console/").content.decode()

    assert re.search(r'data-state="needs_review"[^>]*>Needs review <span class="tab-count">1</span>', html)
    assert '<option value="pending_approval">Awaiting approval</option>' in html


def test_a_summary_never_shows_a_sensitive_value(client, login, workspace, approver):
    """issue-refund's customer and amount are sensitive: its summary names neither, even for an
    approver who may see them."""
    refund = submit_event(workspace=workspace, source="api", raw={"action": "issue-refund", "data": REFUND}).operation
    client.force_login(approver)

    [row] = rows(client.get("/console/", {"state": "pending_approval"}))

    assert row.startswith("R-7 v1 · refund in EUR")
    assert "C-1001" not in row and "4500" not in row and "45.00" not in row
    assert refund.key in row


def test_an_action_without_a_summary_is_summarised_by_its_identity(client, login, make_operation):
    make_operation("needs_review", request_id="INV-1")
    login("viewer")

    [row] = rows(client.get("/console/"))

    assert row.startswith("INV-1 v1 ")


def test_a_summary_leaves_out_what_retention_removed():
    assert (
        summaries.render("{request_id} v{version} · {title}", {"request_id": "R-1", "version": 2}, sensitive=())
        == "R-1 v2"
    )
    assert summaries.render("{title}", None, sensitive=()) == ""


def test_render_leaves_out_a_sensitive_field_however_it_is_asked():
    assert (
        summaries.render("{request_id} {secret}", {"request_id": "R-1", "secret": "s3"}, sensitive=("secret",)) == "R-1"
    )


def test_a_long_summary_is_cut_to_one_cell():
    text = summaries.render("{title}", {"title": "x" * 500}, sensitive=())
    assert len(text) == summaries.MAX_LENGTH and text.endswith("…")


class NotedData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: StrictStr
    version: StrictInt
    secret: StrictStr


@pytest.mark.parametrize(
    ("template", "refusal"),
    [
        ("{request_id} {secret}", "{secret}, a sensitive field"),
        ("{request_id} {nothing}", "{nothing}, which is not a field"),
        ("{request_id!r}", "takes no format or conversion"),
        ("{request_id", "is not a template"),
    ],
)
def test_registering_an_action_whose_summary_could_leak_or_fail_is_refused(template, refusal):
    cls = type(
        "Leaky",
        (base.ActionDefinition,),
        {
            "name": "test-leaky-summary",
            "schema": NotedData,
            "fingerprint_fields": ("request_id", "version", "secret"),
            "sensitive_fields": ("secret",),
            "summary": template,
        },
    )
    with pytest.raises(ValueError, match=re.escape(refusal)):
        base.register(cls)
    assert "test-leaky-summary" not in base.registry.coded


def configured_action(**fields) -> HttpAction:
    return HttpAction(
        name="create-note",
        destination=Destination(slug="notes", base_url="https://notes.example"),
        schema={
            "type": "object",
            "properties": {"request_id": {"type": "string"}, "customer": {"type": "string"}},
        },
        identity_fields=["request_id"],
        normalisers={"request_id": "identifier"},
        fingerprint_fields=["request_id", "customer"],
        sensitive_fields=["customer"],
        request={"method": "POST", "path": "/notes", "body": {}},
        **fields,
    )


def test_a_configured_action_whose_summary_names_a_sensitive_field_is_refused(db):
    problems = outbound.http_action_problems(configured_action(summary="{request_id} for {customer}"))

    assert (
        "summary: the summary names {customer}, a sensitive field: it would show to people it is masked for" in problems
    )


def test_a_configured_action_may_declare_a_summary(db):
    assert not [
        p for p in outbound.http_action_problems(configured_action(summary="Note {request_id}")) if "summary" in p
    ]
