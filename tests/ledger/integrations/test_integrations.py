"""`manage.py integrations apply|export`: sources as a file, applied whole or not at all."""

import json
from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from ledger.models import AuditEvent, Source

RULE = {
    "event": "invoice.paid",
    "action": "prepare-brief",
    "data": {"request_id": "data.object.id", "version": "`1`", "title": "data.object.description", "owner": "'ops'"},
}
FILE = f"""
sources:
  - slug: billing
    workspace: demo
    scheme: stripe
    secret_env: OPSCONSOLE_SOURCE_DEMO_STRIPE
    rules:
      - {json.dumps(RULE)}
  - slug: repo
    workspace: demo
    scheme: github
    secret_env: OPSCONSOLE_SOURCE_DEMO_GITHUB
"""


def integrations(tmp_path, text: str, *args) -> str:
    path = tmp_path / "integrations.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("integrations", "apply", str(path), *args, stdout=out)
    return out.getvalue()


def test_applying_a_file_creates_its_sources_and_applying_it_again_changes_nothing(tmp_path, workspace):
    first = integrations(tmp_path, FILE)
    audited = AuditEvent.objects.filter(kind="source_created").count()
    second = integrations(tmp_path, FILE)

    assert first.splitlines() == ["changed: source billing: created", "changed: source repo: created"]
    assert second.strip() == "no changes"
    assert audited == 2
    assert AuditEvent.objects.filter(kind__startswith="source_").count() == 2
    billing = Source.objects.get(slug="billing")
    assert (billing.scheme, billing.secret_env, billing.rules, billing.tolerance_seconds) == (
        "stripe",
        "OPSCONSOLE_SOURCE_DEMO_STRIPE",
        [RULE],
        300,
    )


def test_a_change_is_printed_field_by_field_and_a_dry_run_makes_none(tmp_path, workspace):
    integrations(tmp_path, FILE)
    rotated = FILE.replace(
        "secret_env: OPSCONSOLE_SOURCE_DEMO_STRIPE",
        "secret_env: OPSCONSOLE_SOURCE_DEMO_STRIPE\n    previous_secret_env: OPSCONSOLE_SOURCE_DEMO_STRIPE_OLD",
    )

    dry = integrations(tmp_path, rotated, "--dry-run")
    assert Source.objects.get(slug="billing").previous_secret_env == ""
    done = integrations(tmp_path, rotated)

    assert dry.strip() == "would change: source billing: previous_secret_env '' -> 'OPSCONSOLE_SOURCE_DEMO_STRIPE_OLD'"
    assert done.strip() == "changed: source billing: previous_secret_env '' -> 'OPSCONSOLE_SOURCE_DEMO_STRIPE_OLD'"
    assert AuditEvent.objects.filter(kind="source_changed").count() == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            FILE.replace("action: prepare-brief", "action: nope").replace('"prepare-brief"', '"nope"'),
            "sources[0].rules[0].action: 'nope' is not a registered action",
        ),
        (
            FILE.replace("workspace: demo\n    scheme: github", "workspace: nowhere\n    scheme: github"),
            "sources[1].workspace: 'nowhere' is not a workspace",
        ),
        (FILE.replace("scheme: github", "scheme: svix"), "sources[1].scheme: one of"),
        (
            FILE.replace("OPSCONSOLE_SOURCE_DEMO_GITHUB", "whsec_abc"),
            "sources[1].secret_env: the name of an environment variable",
        ),
        (FILE.replace("slug: repo", "slug: billing"), "sources[1]: the slug billing appears twice"),
        (FILE + "webhooks_out: []\n", "webhooks_out: unknown section"),
        ("sources: [1", "not YAML or JSON"),
        (
            FILE.replace("    scheme: github", "    scheme: github\n    colour: red"),
            "sources[1].colour: unknown field",
        ),
    ],
)
def test_a_file_with_a_problem_anywhere_changes_nothing_and_says_where(tmp_path, workspace, text, problem):
    with pytest.raises(CommandError) as refused:
        integrations(tmp_path, text)

    assert str(refused.value).startswith("nothing changed:")
    assert problem in str(refused.value)
    assert not Source.objects.exists()
    assert not AuditEvent.objects.filter(kind__startswith="source_").exists()


def test_export_writes_what_apply_takes_back_unchanged(tmp_path, workspace):
    integrations(tmp_path, FILE)
    out = StringIO()

    call_command("integrations", "export", stdout=out)

    exported = yaml.safe_load(out.getvalue())
    assert [entry["slug"] for entry in exported["sources"]] == ["billing", "repo"]
    assert integrations(tmp_path, out.getvalue()).strip() == "no changes"
    assert integrations(tmp_path, json.dumps(exported)).strip() == "no changes"  # JSON is taken too


def test_a_missing_file_is_a_clear_error(workspace):
    with pytest.raises(CommandError, match="cannot read /no/such/file.yaml"):
        call_command("integrations", "apply", "/no/such/file.yaml")


# --- found by an adversarial review: every bad field is a problem said up front, never a traceback -


@pytest.mark.parametrize(
    "line",
    [
        "previous_secret_env:",  # YAML null: what a careless operator writes for "none"
        "tolerance_seconds: 100000000000",  # beyond the column's integer
        "secret_env: 12345",  # not a string
    ],
)
def test_integrations_apply_refuses_a_bad_field_with_a_message_not_a_traceback(tmp_path, workspace, line):
    """Found in review: `integrations apply` promises a file "checked whole, each problem said where", but these
    pass the checks (and --dry-run says they would apply) and then crash at save with
    IntegrityError / DataError / TypeError instead of CommandError."""
    name = line.split(":")[0]
    fields = {"secret_env": "OPSCONSOLE_SOURCE_DEMO_STRIPE"}
    text = "sources:\n  - slug: billing\n    workspace: demo\n    scheme: stripe\n"
    text += "".join(f"    {k}: {v}\n" for k, v in fields.items() if k != name) + f"    {line}\n"
    with pytest.raises(CommandError):
        integrations(tmp_path, text)
    assert not Source.objects.exists()


@pytest.mark.parametrize("slug", ["billing/eu", "Billing Hooks", "x" * 60])
def test_integrations_apply_refuses_a_slug_no_url_can_reach(tmp_path, workspace, slug):
    """Found in review: the slug is only checked to be a non-empty string: `billing/eu` or `Billing Hooks` is
    saved (Model.save runs no validators) as a source /api/v1/hooks/{source} can never reach (or a
    60-character slug crashes the save with DataError): the file should be refused with a problem."""
    text = f"sources:\n  - slug: {json.dumps(slug)}\n    workspace: demo\n    scheme: stripe\n"
    text += "    secret_env: OPSCONSOLE_SOURCE_DEMO_S\n"
    with pytest.raises(CommandError):
        integrations(tmp_path, text)
    assert not Source.objects.exists()
