"""Refusals of signed webhooks before their signature is known good (issue 37, item 8): anyone can
send them, so each is counted per source, client address and reason in the hour, not written as a
delivery row of its own; the deliveries page still shows them, as counts."""

import base64
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from standardwebhooks.webhooks import Webhook

from ledger.core import accounts
from ledger.models import Delivery, HookRefusal, Membership, Source

WHSEC = "whsec_" + base64.b64encode(b"a secret of thirty-two bytes!!!!").decode()
FORGED = "whsec_" + base64.b64encode(b"x" * 32).decode()
BODY = b'{"type": "invoice.paid", "data": {}}'


@pytest.fixture
def hooks(workspace, monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", WHSEC)
    return Source.objects.create(
        workspace=workspace, slug="billing", scheme="standard_webhooks", secret_env="HOOK_SECRET"
    )


def forged_headers(n: int) -> dict:
    at = datetime.now(UTC)
    signature = Webhook(FORGED).sign(f"msg_{n}", at, BODY.decode())
    return {
        "HTTP_WEBHOOK_ID": f"msg_{n}",
        "HTTP_WEBHOOK_TIMESTAMP": str(int(at.timestamp())),
        "HTTP_WEBHOOK_SIGNATURE": signature,
    }


def forge(client, n: int, *, address="10.0.0.1", body=BODY, content_type="application/json", **headers):
    return client.post(
        "/api/v1/hooks/billing", body, content_type=content_type, REMOTE_ADDR=address, **forged_headers(n) | headers
    )


def deliveries_page(client, user, workspace) -> str:
    Membership.objects.get_or_create(user=user, workspace=workspace, defaults={"role": "viewer"})
    client.force_login(user)
    response = client.get("/console/deliveries/")
    assert response.status_code == 200
    return response.content.decode()


def test_200_forged_deliveries_write_a_bounded_number_of_rows_and_the_page_shows_the_count(
    client, hooks, workspace, django_user_model
):
    answers = {forge(client, n).status_code for n in range(200)}

    assert answers == {401}
    assert Delivery.objects.count() == 0
    html = deliveries_page(client, django_user_model.objects.create_user("viewer"), workspace)
    assert "Refused 200 times from 10.0.0.1" in html
    assert "bad_signature" in html


def test_challenges_are_counted_not_written_a_row_each(client, hooks, workspace, django_user_model):
    answers = [
        client.post("/api/v1/hooks/billing", b"", content_type="application/json", HTTP_WEBHOOK_CHALLENGE=f"c-{n}")
        for n in range(30)
    ]

    assert {answer.status_code for answer in answers} == {200}
    assert Delivery.objects.count() == 0
    html = deliveries_page(client, django_user_model.objects.create_user("viewer"), workspace)
    assert "Refused 30 times from 127.0.0.1" not in html  # answered, not refused
    assert "Challenged 30 times from 127.0.0.1" in html


def test_a_body_refused_before_its_signature_is_read_is_counted_too(client, hooks):
    """A hook's body is read (media type, size) before its signature is checked: still anyone's."""
    for n in range(5):
        assert forge(client, n, content_type="text/plain").status_code == 415

    assert Delivery.objects.count() == 0
    assert counts() == [("billing", "10.0.0.1", "unsupported_media_type", 5)]


def test_each_address_and_reason_is_its_own_count(client, hooks):
    for n in range(3):
        forge(client, n, address="10.0.0.1")
        forge(client, n, address="10.0.0.2")
    forge(client, 9, address="10.0.0.1", HTTP_WEBHOOK_SIGNATURE="")

    assert counts() == [
        ("billing", "10.0.0.1", "bad_signature", 3),
        ("billing", "10.0.0.1", "missing_signature", 1),
        ("billing", "10.0.0.2", "bad_signature", 3),
    ]


def test_an_ipv6_sender_is_counted_per_64_network(client, hooks):
    """One IPv6 host has a /64 of its own to send from: a count per address would be a row each."""
    forge(client, 1, address="2001:db8:1:2::a")
    forge(client, 2, address="2001:db8:1:2:ffff::b")

    assert counts() == [("billing", "2001:db8:1:2::/64", "bad_signature", 2)]


def test_a_new_hour_starts_a_new_count(client, hooks, time_machine):
    time_machine.move_to(datetime(2026, 3, 1, 9, 59, tzinfo=UTC))
    forge(client, 1, HTTP_WEBHOOK_TIMESTAMP=str(int(datetime(2026, 3, 1, 9, 59, tzinfo=UTC).timestamp())))
    time_machine.move_to(datetime(2026, 3, 1, 10, 1, tzinfo=UTC))
    forge(client, 2, HTTP_WEBHOOK_TIMESTAMP=str(int(datetime(2026, 3, 1, 10, 1, tzinfo=UTC).timestamp())))

    assert HookRefusal.objects.order_by("hour").values_list("hour", "count")[::1] == [
        (datetime(2026, 3, 1, 9, tzinfo=UTC), 1),
        (datetime(2026, 3, 1, 10, tzinfo=UTC), 1),
    ]


def test_a_viewer_of_another_workspace_does_not_see_them(client, hooks, django_user_model):
    for n in range(3):
        forge(client, n)
    other, _ = accounts.create_workspace(slug="other", approved_owners=["ops"], actor="test")

    html = deliveries_page(client, django_user_model.objects.create_user("outsider"), other)

    assert "Refused 3 times" not in html


def test_a_signed_delivery_that_is_refused_later_is_still_a_row_of_its_own(client, hooks):
    """Once the signature is good, the sender is who it says: its refusals are its own rows."""
    at = datetime.now(UTC)
    body = b"{not json"
    headers = {
        "HTTP_WEBHOOK_ID": "msg_1",
        "HTTP_WEBHOOK_TIMESTAMP": str(int(at.timestamp())),
        "HTTP_WEBHOOK_SIGNATURE": Webhook(WHSEC).sign("msg_1", at, body.decode()),
    }

    response = client.post("/api/v1/hooks/billing", body, content_type="application/json", **headers)

    assert response.status_code == 400
    assert Delivery.objects.get().outcome == "invalid"
    assert counts() == []


@pytest.mark.django_db(transaction=True)
def test_counting_200_refusals_leaves_no_trail_of_dead_rows(client, workspace, monkeypatch):
    """Autovacuum may be off: each count is a HOT update on a page kept half empty, whose old
    versions the next visit to the page prunes, so the table grows by one page however many come."""
    monkeypatch.setenv("HOOK_SECRET", WHSEC)
    Source.objects.create(workspace=workspace, slug="billing", scheme="standard_webhooks", secret_env="HOOK_SECRET")
    size, hot_updates = table_size_and_hot_updates()

    for n in range(200):
        forge(client, n)

    assert counts() == [("billing", "10.0.0.1", "bad_signature", 200)]
    size_after, hot_updates_after = table_size_and_hot_updates()
    assert (size_after - size <= 8192, hot_updates_after - hot_updates) == (True, 199)


def table_size_and_hot_updates() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this session's updates, counted now
        cursor.execute(
            "SELECT pg_relation_size(relid), n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s",
            [HookRefusal._meta.db_table],
        )
        return cursor.fetchone()


def test_retention_forgets_counts_past_the_default_key_window(client, hooks, time_machine):
    from django.core.management import call_command

    now = datetime.now(UTC)
    time_machine.move_to(now - timedelta(days=400))
    forge(client, 1)
    time_machine.move_to(now)
    forge(client, 2)

    call_command("purge")

    assert [hour.date() for hour in HookRefusal.objects.values_list("hour", flat=True)] == [now.date()]


def counts() -> list[tuple]:
    return list(
        HookRefusal.objects.order_by("address", "reason").values_list("source__slug", "address", "reason", "count")
    )
