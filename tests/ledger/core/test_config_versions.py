"""Configuration versions (ledger.core.configuration): each attempt names the configuration it ran under,
stored once per content; a replay after a change shows what changed, field by field, and needs
the person's confirmation."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.actions import get_action
from ledger.core import configuration, policies
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, AuditEvent, ConfigVersion, Operation
from ledger.outcomes import PermanentError
from ledger.people import replays
from tests.ledger.conftest import submit


def needing_review(workspace, action, request_id="R-1"):
    action.destination.answer(PermanentError("owner does not exist"))
    operation = submit(workspace, action.name, request_id=request_id)
    process_due_operations(worker="w1")
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    return operation


@pytest.fixture
def action(scripted_action):
    return scripted_action()


def test_every_attempt_names_its_configuration_stored_once(workspace, action):
    for request_id in ("R-1", "R-2", "R-3"):
        submit(workspace, action.name, request_id=request_id)

    process_due_operations(worker="w1")

    digests = set(Attempt.objects.values_list("config_version_id", flat=True))
    assert len(digests) == 1
    assert None not in digests
    stored = ConfigVersion.objects.get()
    assert (stored.action, stored.content["policy"]["key_retention"]) == (action.name, "90d")
    assert stored.content["identity"] == ["request_id", "version"]


def test_the_destination_url_is_part_of_the_configuration_though_not_of_the_definition_version(db, settings):
    ticket = get_action("file-ticket")
    settings.OPSCONSOLE_STANDIN_URL = "http://destination-a.example/"
    before = configuration.content(1, ticket)
    version_before = ticket.version
    settings.OPSCONSOLE_STANDIN_URL = "http://destination-b.example/"

    changes = configuration.differences(before, configuration.content(1, ticket))

    assert [str(change) for change in changes] == [
        'destination_url: "http://destination-a.example/" -> "http://destination-b.example/"'
    ]
    assert ticket.version == version_before


def test_a_replay_after_a_configuration_change_lists_the_changes_and_does_nothing(workspace, action, alice):
    operation = needing_review(workspace, action)
    policies.set_policy(workspace=workspace, action=action.name, actor="test", key_retention=timedelta(days=400))

    with pytest.raises(replays.ConfigChanged) as refused:
        replays.replay_operation(operation, user=alice, reason="owner created")

    assert [str(change) for change in refused.value.changes] == ['policy.key_retention: "90d" -> "400d"']
    assert "Confirm the replay under the new configuration" in str(refused.value)
    operation.refresh_from_db()
    assert operation.state == "needs_review"
    assert not AuditEvent.objects.filter(kind="replayed").exists()


def test_a_confirmed_replay_runs_under_the_new_configuration_and_audits_the_change(workspace, action, alice):
    operation = needing_review(workspace, action)
    policies.set_policy(workspace=workspace, action=action.name, actor="test", payload_retention=timedelta(days=2))

    replays.replay_operation(operation, user=alice, reason="owner created", accept_config_change=True)

    assert "under a changed configuration: policy.payload_retention" in AuditEvent.objects.get(kind="replayed").message
    process_due_operations(worker="w1")
    latest = Attempt.objects.filter(operation=operation).order_by("-id").first()
    assert latest.config_version.content["policy"]["payload_retention"] == "2d"
    assert len(set(Attempt.objects.values_list("config_version_id", flat=True))) == 2


def test_an_unchanged_configuration_needs_no_confirmation(workspace, action, alice):
    operation = needing_review(workspace, action)

    replays.replay_operation(operation, user=alice, reason="owner created")

    assert Operation.objects.get(pk=operation.pk).state == "pending"


def test_the_replay_command_needs_accept_config_change_when_it_changed(workspace, action, alice):
    operation = needing_review(workspace, action)
    policies.set_policy(workspace=workspace, action=action.name, actor="test", key_retention=timedelta(days=400))
    args = [operation.key, "--workspace", "demo", "--as", "alice", "--reason", "owner created"]

    with pytest.raises(CommandError, match="policy.key_retention.*--accept-config-change"):
        call_command("replay", *args)
    out = StringIO()
    call_command("replay", *args, "--accept-config-change", stdout=out)

    assert out.getvalue().strip() == f"{operation.key} is now pending."
