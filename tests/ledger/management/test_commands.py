"""The command line: create_workspace prints a usable token; submit takes JSON lines like the API."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from ledger.core.accounts import authenticate_token
from ledger.models import Delivery, Operation, Workspace
from tests.conftest import event


def run(*args, stdin: str | None = None, monkeypatch=None) -> tuple[list[str], int]:
    """Run a command; return its output lines and exit status (0, or the SystemExit code)."""
    out = io.StringIO()
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    try:
        call_command(*args, stdout=out)
    except SystemExit as exc:
        return out.getvalue().splitlines(), exc.code
    return out.getvalue().splitlines(), 0


def json_lines(*bodies) -> str:
    return "".join((body if isinstance(body, str) else json.dumps(body)) + "\n" for body in bodies)


# --- create_workspace -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_prints_the_new_token_alone_on_the_last_line():
    lines, status = run("create_workspace", "acme", "--owners", "ops, finance")

    assert status == 0
    token = lines[-1]
    assert token == token.strip()
    assert " " not in token
    assert token.startswith("oc_")
    workspace = Workspace.objects.get(slug="acme")
    assert workspace.approved_owners == ["ops", "finance"]
    assert authenticate_token(token).workspace == workspace
    assert all(token not in line for line in lines[:-1])


@pytest.mark.django_db
def test_it_prints_a_token_that_authenticates_over_http(client):
    lines, _ = run("create_workspace", "acme", "--owners", "ops")

    response = client.post(
        "/api/v1/events", event(), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {lines[-1]}"
    )

    assert response.status_code == 201, response.json()
    assert response.json()["key"] == "acme:R-42:v3:prepare-brief"


@pytest.mark.django_db
def test_it_refuses_a_duplicate_slug():
    run("create_workspace", "acme")
    with pytest.raises(CommandError, match="already exists"):
        run("create_workspace", "acme")
    assert Workspace.objects.filter(slug="acme").count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("slug", ["not a slug", "acme:prod", "", "x" * 51])
def test_it_refuses_a_bad_slug(slug):
    with pytest.raises(CommandError):
        run("create_workspace", slug)
    assert Workspace.objects.count() == 0


@pytest.mark.django_db
def test_it_sets_the_retry_budget_of_a_new_workspace():
    run("create_workspace", "acme", "--retry-budget", "30")
    assert Workspace.objects.get(slug="acme").retry_budget_per_hour == 30


@pytest.mark.django_db
def test_it_refuses_a_negative_retry_budget():
    with pytest.raises(CommandError, match="retry_budget_per_hour"):
        run("create_workspace", "acme", "--retry-budget", "-1")
    assert Workspace.objects.count() == 0


# --- submit ---------------------------------------------------------------------------------------


def test_it_submits_json_lines_from_a_file(workspace, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json_lines(event("delivery-1"), event("delivery-2"), event("delivery-3", version=4)))

    lines, status = run("submit", str(path), "--workspace", "demo")

    assert status == 0
    results = [json.loads(line) for line in lines]
    assert [(r["line"], r["http_status"], r["status"]) for r in results] == [
        (1, 201, "accepted"),
        (2, 200, "duplicate"),
        (3, 201, "accepted"),
    ]
    assert results[0]["key"] == "demo:R-42:v3:prepare-brief"
    assert Operation.objects.count() == 2
    assert set(Delivery.objects.values_list("source", flat=True)) == {Delivery.Source.CLI}


def test_it_submits_json_lines_from_standard_input(workspace, monkeypatch):
    lines, status = run(
        "submit", "-", "--workspace", "demo", stdin=json_lines(event("delivery-1")), monkeypatch=monkeypatch
    )

    assert status == 0
    assert [json.loads(line)["status"] for line in lines] == ["accepted"]
    assert Operation.objects.get().key == "demo:R-42:v3:prepare-brief"


def test_it_reads_standard_input_when_no_file_is_named(workspace, monkeypatch):
    lines, status = run("submit", "--workspace", "demo", stdin=json_lines(event()), monkeypatch=monkeypatch)
    assert status == 0
    assert len(lines) == 1


def test_it_skips_blank_lines_and_numbers_lines_as_read(workspace, monkeypatch):
    stdin = "\n" + json_lines(event("delivery-1")) + "   \n" + json_lines(event("delivery-2"))
    lines, status = run("submit", "-", "--workspace", "demo", stdin=stdin, monkeypatch=monkeypatch)
    assert status == 0
    assert [json.loads(line)["line"] for line in lines] == [2, 4]


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        (event("delivery-2", title="Changed without a new version"), "payload_conflict"),
        (event("delivery-2", version=0), "invalid_input"),
        ('{"action": "prepare-brief", ', "malformed_json"),
    ],
)
def test_it_exits_non_zero_when_any_line_is_blocked(workspace, monkeypatch, bad_line, reason):
    """Every line is still submitted and answered; the exit status says something was blocked."""
    stdin = json_lines(event("delivery-1"), bad_line, event("delivery-3", version=4))

    lines, status = run("submit", "-", "--workspace", "demo", stdin=stdin, monkeypatch=monkeypatch)

    assert status == 1
    results = [json.loads(line) for line in lines]
    assert [r["status"] for r in results] == ["accepted", "blocked", "accepted"]
    assert results[1]["reason"] == reason
    assert Delivery.objects.count() == 3
    assert Operation.objects.count() == 2


def test_it_records_a_malformed_line_as_an_invalid_delivery(workspace, monkeypatch):
    run("submit", "-", "--workspace", "demo", stdin="{oops\n", monkeypatch=monkeypatch)
    delivery = Delivery.objects.get()
    assert delivery.outcome == Delivery.Outcome.INVALID
    assert delivery.source == Delivery.Source.CLI
    assert delivery.operation is None


def test_it_exits_zero_for_duplicates(workspace, monkeypatch):
    lines, status = run(
        "submit", "-", "--workspace", "demo", stdin=json_lines(event("d-1"), event("d-1")), monkeypatch=monkeypatch
    )
    assert status == 0
    assert [json.loads(line)["status"] for line in lines] == ["accepted", "duplicate"]


def test_it_refuses_an_unknown_workspace_clearly(workspace, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json_lines(event()))
    with pytest.raises(CommandError, match="No workspace 'nowhere'"):
        run("submit", str(path), "--workspace", "nowhere")
    assert Delivery.objects.count() == 0


def test_it_refuses_a_missing_file_clearly(workspace, tmp_path):
    with pytest.raises(CommandError, match="Cannot read"):
        run("submit", str(tmp_path / "missing.jsonl"), "--workspace", "demo")


def test_it_answers_a_line_nested_too_deeply_as_malformed(workspace, monkeypatch):
    stdin = "[" * 5000 + "]" * 5000 + "\n" + json_lines(event())
    lines, status = run("submit", "-", "--workspace", "demo", stdin=stdin, monkeypatch=monkeypatch)
    assert status == 1
    assert [(r["status"], r.get("reason")) for r in map(json.loads, lines)] == [
        ("blocked", "malformed_json"),
        ("accepted", None),
    ]
