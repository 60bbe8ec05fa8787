"""The admin names states and writes times as the console does: "Outcome unknown", not "Unknown";
"2026-12-06 00:29:58 CET" in the person's zone, not "Dec. 6, 2026, 12:29 a.m."."""

import re
import zoneinfo

from django.utils import timezone

from ledger.models import AuditEvent, Operation
from tests.ledger.conftest import submit_brief


def test_the_admin_reads_states_and_times_as_the_console(client, workspace, django_user_model):
    operation = submit_brief(workspace)
    Operation.objects.filter(pk=operation.pk).update(state="unknown")
    admin = django_user_model.objects.create_superuser("root", password="pw")
    client.force_login(admin)
    client.cookies["tz"] = "Europe/Berlin"

    listing = client.get("/admin/ledger/operation/").content.decode()
    change = client.get(f"/admin/ledger/operation/{operation.pk}/change/").content.decode()
    events = client.get("/admin/ledger/auditevent/").content.decode()

    assert "Outcome unknown" in listing
    assert ">Unknown<" not in listing
    assert "Outcome unknown" in change
    assert 'href="?state=needs_review"' in listing  # the filter's choices, in the console's words
    created = timezone.localtime(AuditEvent.objects.latest("id").created_at, zoneinfo.ZoneInfo("Europe/Berlin"))
    assert created.strftime("%Y-%m-%d %H:%M:%S %Z") in events  # console_time.when_text's form
    assert not re.search(r"[ap]\.m\.", events)
