"""`manage.py integrations apply|export` (issue 26): sources as a file, applied whole or not at all."""

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
    secret_env: STRIPE_WEBHOOK_SECRET
    rules:
      - {json.dumps(RULE)}
  - slug: repo
    workspace: demo
    scheme: github
    secret_env: GITHUB_WEBHOOK_SECRET
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
    assert audited == 2 and AuditEvent.objects.filter(kind__startswith="source_").count() == 2
    billing = Source.objects.get(slug="billing")
    assert (billing.scheme, billing.secret_env, billing.rules, billing.tolerance_seconds) == (
        "stripe",
        "STRIPE_WEBHOOK_SECRET",
        [RULE],
        300,
    )


def test_a_change_is_printed_field_by_field_and_a_dry_run_makes_none(tmp_path, workspace):
    integrations(tmp_path, FILE)
    rotated = FILE.replace(
        "secret_env: STRIPE_WEBHOOK_SECRET", "secret_env: STRIPE_WEBHOOK_SECRET\n    previous_secret_env: STRIPE_OLD"
    )

    dry = integrations(tmp_path, rotated, "--dry-run")
    assert Source.objects.get(slug="billing").previous_secret_env == ""
    done = integrations(tmp_path, rotated)

    assert dry.strip() == "would change: source billing: previous_secret_env '' -> 'STRIPE_OLD'"
    assert done.strip() == "changed: source billing: previous_secret_env '' -> 'STRIPE_OLD'"
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
            FILE.replace("GITHUB_WEBHOOK_SECRET", "whsec_abc"),
            "sources[1].secret_env: the name of an environment variable",
        ),
        (FILE.replace("slug: repo", "slug: billing"), "sources[1]: the slug billing appears twice"),
        (FILE + "destinations: []\n", "destinations: unknown section"),
        ("sources: [1", "not YAML or JSON"),
        (
            FILE.replace("    secret_env: GITHUB", "    colour: red\n    secret_env: GITHUB"),
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
