"""Refusals of signed webhooks before their signature is known good: anyone can
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
# A source's secret is named in the environment under its workspace's prefix (docs/operations.md).
SECRET_ENV = "OPSCONSOLE_SOURCE_DEMO_HOOK"


@pytest.fixture
def hooks(workspace, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, WHSEC)
    return Source.objects.create(workspace=workspace, slug="billing", scheme="standard_webhooks", secret_env=SECRET_ENV)


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


def test_an_ipv6_sender_is_counted_per_48_network(client, hooks):
    """One IPv6 sender holds a /48 of its own to send from (a /64 each for 65,536 networks): a count
    per address, or per /64, would be a row each."""
    forge(client, 1, address="2001:db8:1:2::a")
    forge(client, 2, address="2001:db8:1:ffff::b")
    forge(client, 3, address="[2001:db8:1:3::c]:443")

    assert counts() == [("billing", "2001:db8:1::/48", "bad_signature", 3)]


def test_a_port_after_the_address_is_not_part_of_it(client, hooks):
    for n, address in enumerate(["10.0.0.1:40001", "10.0.0.1:40002", "10.0.0.1", "::ffff:10.0.0.1"]):
        forge(client, n, address=address)

    assert counts() == [("billing", "10.0.0.1", "bad_signature", 4)]


def test_a_trusted_proxy_that_appends_the_client_s_port_adds_no_row_per_port(client, hooks, settings):
    settings.OPSCONSOLE_TRUSTED_PROXIES = ["10.9.9.9"]
    for n in range(20):
        forge(client, n, address="10.9.9.9", HTTP_X_FORWARDED_FOR=f"198.51.100.7:{40000 + n}")
    forge(client, 20, address="10.9.9.9", HTTP_X_FORWARDED_FOR="1.2.3.4, [2001:db8:5:6::7]:51000")

    assert counts() == [
        ("billing", "198.51.100.7", "bad_signature", 20),
        ("billing", "2001:db8:5::/48", "bad_signature", 1),
    ]


def test_whatever_does_not_read_as_an_address_is_counted_as_one_unknown(
    client, hooks, settings, workspace, django_user_model
):
    settings.OPSCONSOLE_TRUSTED_PROXIES = ["10.9.9.9"]
    for n in range(10):
        forge(client, n, address="10.9.9.9", HTTP_X_FORWARDED_FOR=f"not-an-address-{n}")
    forge(client, 10, address="")
    forge(client, 11, address="10.0.0.1:port")
    forge(client, 12, address="[10.0.0.1]:")

    assert counts() == [("billing", "", "bad_signature", 13)]
    html = deliveries_page(client, django_user_model.objects.create_user("viewer"), workspace)
    assert "Refused 13 times from an unknown address" in html


def test_past_100_addresses_in_an_hour_the_rest_are_counted_together(client, hooks, workspace, django_user_model):
    """A sender of many addresses (a botnet, a /16) writes at most 100 rows an hour at a source, and
    one more for all the others; an address already counted keeps its own count."""
    for n in range(150):
        forge(client, n, address=f"10.1.{n // 200}.{n % 200}")
    forge(client, 150, address="10.1.0.0")
    forge(client, 151, address="10.1.0.0", HTTP_WEBHOOK_SIGNATURE="")

    rows = counts()
    assert len(rows) == 102
    assert ("billing", "10.1.0.0", "bad_signature", 2) in rows
    assert ("billing", "10.1.0.0", "missing_signature", 1) in rows
    assert ("billing", "other addresses", "bad_signature", 50) in rows
    assert HookRefusal.objects.values("address").distinct().count() == 101
    html = deliveries_page(client, django_user_model.objects.create_user("viewer"), workspace)
    assert "Refused 50 times from other addresses" in html


def test_the_limit_is_per_source_and_hour(client, hooks, workspace, monkeypatch, time_machine):
    Source.objects.create(workspace=workspace, slug="crm", scheme="standard_webhooks", secret_env=SECRET_ENV)
    at = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    time_machine.move_to(at)
    stamp = {"HTTP_WEBHOOK_TIMESTAMP": str(int(at.timestamp()))}
    for n in range(101):
        forge(client, n, address=f"10.2.0.{n}", **stamp)
    client.post(
        "/api/v1/hooks/crm", BODY, content_type="application/json", REMOTE_ADDR="10.2.0.200", **forged_headers(0)
    )
    at = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
    time_machine.move_to(at)
    forge(client, 200, address="10.2.0.201", HTTP_WEBHOOK_TIMESTAMP=str(int(at.timestamp())))

    assert HookRefusal.objects.filter(address="other addresses").values_list("source__slug", "count")[::1] == [
        ("billing", 1)
    ]
    assert HookRefusal.objects.filter(address__in=["10.2.0.200", "10.2.0.201"]).count() == 2


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


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.alone  # pruning waits for every open transaction of the server, whatever its database
def test_counting_200_refusals_leaves_no_trail_of_dead_rows(client, workspace, monkeypatch):
    """Autovacuum may be off: each count is a HOT update on a page kept half empty, whose old
    versions the next visit to the page prunes, so the table grows by one page however many come."""
    monkeypatch.setenv(SECRET_ENV, WHSEC)
    Source.objects.create(workspace=workspace, slug="billing", scheme="standard_webhooks", secret_env=SECRET_ENV)
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
