"""Subscriptions (ledger.integrations.subscriptions): configured by the integrations file and the
admin through one service, checked whole, audited, and named secrets of their workspace only."""

from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from ledger.core import announcements
from ledger.integrations import file as integrations_file
from ledger.integrations.subscriptions import SubscriptionRefused, save_subscription, subscription_problems
from ledger.models import AuditEvent, Subscription, Workspace
from tests.subscribed import SECRET, SECRET_ENV

ROW = {
    "name": "flows",
    "workspace": "demo",
    "url": "https://flows.example.com/hooks",
    "events": ["operation.due", "operation.needs_review"],
    "secret_env": SECRET_ENV,
}


def apply_rows(tmp_path, *rows) -> str:
    path = tmp_path / "integrations.yaml"
    path.write_text(yaml.safe_dump({"subscriptions": list(rows)}))
    out = StringIO()
    call_command("integrations", "apply", str(path), stdout=out)
    return out.getvalue()


def test_the_file_creates_a_subscription_audited_in_its_workspace_and_heard_at_once(tmp_path, workspace):
    apply_rows(tmp_path, ROW)

    subscription = Subscription.objects.get()
    assert (subscription.url, subscription.events, subscription.active) == (ROW["url"], ROW["events"], True)
    event = AuditEvent.objects.get(kind="subscription_created")
    assert event.workspace_id == workspace.pk
    assert [listener.name for listener in announcements.listeners(workspace.pk)] == ["flows"]


def test_applying_the_same_file_again_changes_nothing_and_export_gives_it_back(tmp_path, workspace):
    apply_rows(tmp_path, ROW)
    apply_rows(tmp_path, ROW)

    assert AuditEvent.objects.filter(kind__startswith="subscription").count() == 1

    exported = yaml.safe_load(integrations_file.export())["subscriptions"]
    assert exported == [ROW | {"active": True}]


def test_switching_a_subscription_off_is_a_change_and_it_is_heard_no_more(tmp_path, workspace):
    apply_rows(tmp_path, ROW)
    apply_rows(tmp_path, ROW | {"active": False})

    assert AuditEvent.objects.filter(kind="subscription_changed").count() == 1
    assert announcements.listeners(workspace.pk) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"events": ["operation.maybe"]}, "events: operation.maybe is not an event"),
        ({"events": []}, "events: a list of one or more of"),
        ({"events": ["operation.due", "operation.due"]}, "events: an event is listed twice"),
        ({"url": "ftp://flows.example.com/"}, "url: an http:// or https:// URL"),
        ({"url": "http://169.254.169.254/latest"}, "refused by the egress policy"),
        ({"secret_env": "whsec_abc"}, "secret_env: the name of an environment variable"),
        ({"secret_env": "SECRET_KEY"}, "secret_env: SECRET_KEY is not workspace demo's to name"),
        ({"name": "no spaces please"}, "name: letters, digits, - and _"),
        ({"active": "yes"}, "active: true or false"),
        ({"workspace": "nowhere"}, "workspace: 'nowhere' is not a workspace"),
        ({"colour": "red"}, "colour: unknown field"),
    ],
)
def test_a_bad_subscription_is_refused_saying_where_and_nothing_is_written(tmp_path, workspace, change, problem):
    with pytest.raises(CommandError) as refused:
        apply_rows(tmp_path, ROW | change)

    assert problem in str(refused.value)
    assert not Subscription.objects.exists()
    assert not AuditEvent.objects.filter(kind__startswith="subscription").exists()


def test_a_subscription_of_another_workspace_keeps_its_name(tmp_path, workspace):
    Workspace.objects.create(slug="other")
    apply_rows(tmp_path, ROW)

    with pytest.raises(CommandError, match="subscription flows belongs to workspace demo"):
        apply_rows(tmp_path, ROW | {"workspace": "other", "secret_env": "OPSCONSOLE_SOURCE_OTHER_NOTIFY"})


def test_the_service_refuses_what_the_file_refuses(workspace):
    bad = Subscription(workspace=workspace, name="flows", url="https://x.example/", events=["nope"], secret_env="PATH")

    with pytest.raises(SubscriptionRefused) as refused:
        save_subscription(bad, actor="test")
    assert refused.value.problems == subscription_problems(bad)
    assert not Subscription.objects.exists()


@pytest.fixture
def boss(client, person, workspace):
    """demo's workspace admin in the admin (staff, role admin; not a superuser)."""
    user = person("boss", "admin")
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


def admin_form(workspace, **changes) -> dict:
    return {
        "workspace": workspace.pk,
        "name": "flows",
        "url": "https://flows.example.com/hooks",
        "events": ["operation.due"],
        "secret_env": SECRET_ENV,
        "active": "on",
    } | changes


def test_a_workspace_admin_adds_a_subscription_in_the_admin_and_sees_whether_its_secret_is_set(
    boss, workspace, monkeypatch
):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    added = boss.post("/admin/ledger/subscription/add/", admin_form(workspace))

    assert added.status_code == 302, added.content.decode()[:3000]
    assert Subscription.objects.get().events == ["operation.due"]
    assert AuditEvent.objects.get(kind="subscription_created").actor == "boss"
    page = boss.get("/admin/ledger/subscription/").content.decode()
    assert "set" in page
    assert SECRET not in page


def test_the_admin_refuses_a_foreign_variable_and_writes_nothing(boss, workspace):
    refused = boss.post("/admin/ledger/subscription/add/", admin_form(workspace, secret_env="SECRET_KEY"))

    assert refused.status_code == 200
    assert "is not workspace demo&#x27;s to name" in refused.content.decode()
    assert not Subscription.objects.exists()


def test_a_workspace_admin_switches_a_subscription_off_in_the_admin(boss, workspace, monkeypatch):
    subscription = save_subscription(
        Subscription(
            workspace=workspace, name="flows", url="https://f.example/", events=["operation.due"], secret_env=SECRET_ENV
        ),
        actor="test",
    )
    url = f"/admin/ledger/subscription/{subscription.pk}/change/"
    page = boss.get(url).content.decode()
    assert 'value="operation.due" class="radiolist" id="id_events_0" checked>' in page
    assert 'value="operation.needs_review" class="radiolist" id="id_events_1">' in page

    changed = boss.post(url, admin_form(workspace, url="https://f.example/", active=""))

    assert changed.status_code == 302, changed.content.decode()[:3000]
    subscription.refresh_from_db()
    assert subscription.active is False
    assert AuditEvent.objects.get(kind="subscription_changed").message.startswith("subscription flows (inactive)")
