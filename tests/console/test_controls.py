"""The controls page shows the active pause switches and pulls or releases them through set_paused."""

from django.contrib.messages import get_messages

from ledger.core import accounts
from ledger.models import AuditEvent, Control
from ledger.people import pause


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def test_it_pauses_a_workspace_and_an_action_with_a_reason(client, login, workspace, action):
    login("operator")

    response = client.post(
        "/console/controls/pause/", {"workspace": workspace.pk, "action": action.name, "reason": "destination down"}
    )

    assert (response.status_code, response.url) == (302, "/console/controls/")
    assert messages_of(response) == [("success", f"Paused workspace demo, action {action.name}.")]
    control = Control.objects.get(paused=True)
    assert (control.workspace, control.action, control.reason, control.changed_by) == (
        workspace,
        action.name,
        "destination down",
        "operator",
    )
    page = client.get("/console/controls/").content.decode()
    assert f"workspace demo, action {action.name}" in page
    assert "destination down" in page
    assert ">Resume</button>" in page


def test_it_lets_only_a_superuser_pause_everything(client, login, admin_user):
    login("operator")

    response = client.post("/console/controls/pause/", {"workspace": "", "action": "", "reason": "incident 12"})

    assert messages_of(response) == [("error", "Workspace is required; nothing was changed.")]
    client.force_login(admin_user)
    client.post("/console/controls/pause/", {"workspace": "", "action": "", "reason": "incident 12"})
    assert Control.objects.get(paused=True).scope_label == "global"


def test_it_refuses_a_pause_without_a_reason(client, login, workspace):
    login("operator")

    response = client.post("/console/controls/pause/", {"workspace": workspace.pk, "action": "", "reason": ""})

    assert messages_of(response) == [("error", "Reason is required; nothing was changed.")]
    assert not Control.objects.exists()


def test_it_offers_only_the_persons_workspaces_to_pause(client, login, workspace):
    accounts.create_workspace(slug="other", approved_owners=[], actor="test")
    login("operator")

    page = client.get("/console/controls/").content.decode()

    assert f'<option value="{workspace.pk}">demo</option>' in page
    assert "other" not in page
    assert "All workspaces" not in page


def test_it_resumes_a_paused_scope(client, login, workspace):
    login("operator")
    pause.set_paused(paused=True, actor="someone", reason="incident", workspace=workspace)

    response = client.post("/console/controls/resume/", {"workspace": workspace.pk, "action": ""})

    assert messages_of(response) == [("success", "Resumed workspace demo.")]
    assert not Control.objects.filter(paused=True).exists()
    assert AuditEvent.objects.filter(kind="resumed", actor="operator").count() == 1
    assert "Nothing is paused" in client.get("/console/controls/").content.decode()


def test_it_reports_a_resume_of_a_scope_that_is_not_paused(client, login, workspace):
    login("operator")

    response = client.post("/console/controls/resume/", {"workspace": workspace.pk, "action": ""})

    assert messages_of(response) == [("error", "Nothing to resume: workspace demo is not paused.")]
    assert not AuditEvent.objects.filter(kind="resumed").exists()


def test_it_shows_a_global_switch_to_everyone_but_lets_only_a_superuser_resume_it(client, login):
    login("operator")
    pause.set_paused(paused=True, actor="someone", reason="incident 9")

    page = client.get("/console/controls/").content.decode()

    assert "incident 9" in page
    assert ">Resume</button>" not in page
    assert client.post("/console/controls/resume/", {"workspace": "", "action": ""}).status_code == 403
    assert Control.objects.get().paused


def test_it_shows_the_switches_but_no_buttons_without_the_pause_permission(client, login, workspace):
    login("viewer")
    pause.set_paused(paused=True, actor="someone", reason="incident 7", workspace=workspace)

    page = client.get("/console/controls/").content.decode()

    assert "incident 7" in page
    assert ">Resume</button>" not in page
    assert ">Pause</button>" not in page
    assert client.post("/console/controls/pause/", {"reason": "x", "workspace": workspace.pk}).status_code == 403
    assert client.post("/console/controls/resume/", {"workspace": workspace.pk}).status_code == 403
    assert Control.objects.get().reason == "incident 7"


def test_it_answers_a_get_of_pause_and_resume_with_method_not_allowed(client, login):
    login("operator")

    assert client.get("/console/controls/pause/").status_code == 405
    assert client.get("/console/controls/resume/").status_code == 405


def test_it_labels_the_pause_form(client, login):
    login("operator")

    page = client.get("/console/controls/").content.decode()

    for label, field in [("Workspace", "id_workspace"), ("Action", "id_action"), ("Reason", "id_reason")]:
        assert f'<label for="{field}">{label}</label>' in page
    assert ">Pause</button>" in page
