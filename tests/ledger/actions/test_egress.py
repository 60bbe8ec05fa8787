"""The egress policy for destinations: where a destination may send our calls.
Link-local addresses and the cloud metadata address are refused always; loopback and private ranges
unless OPSCONSOLE_EGRESS_ALLOW_PRIVATE allows them. Checked when a destination is configured (the
integrations file, the admin) and again at each call, on the addresses the host resolves to then,
and the call connects to the address it checked (no second lookup a DNS answer could change).

No test here sends traffic to any address but 127.0.0.1: every other address is refused before a
connection is tried."""

import ipaddress
import socket
from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from ledger.actions import egress, http
from ledger.engine.processing import process_due_operations
from ledger.intake.submit import submit_event
from ledger.integrations import configured
from ledger.models import Attempt, Destination, HttpAction
from standin.server import start_in_thread
from tests.faults.proxy import ForwardProxy

ACTION = {
    "name": "file-record",
    "destination": "vendor",
    "schema": {"type": "object", "required": ["request_id"], "properties": {"request_id": {"type": "string"}}},
    "identity_fields": ["request_id"],
    "normalisers": {"request_id": "identifier"},
    "fingerprint_fields": ["request_id"],
    "max_attempts": 5,
    "request": {"method": "POST", "path": "/records", "body": {"reference": "{{ key }}", "payload": {}}},
    "response": {"record_id": "id"},
}
ALWAYS_REFUSED = [
    ("http://169.254.169.254", "169.254.169.254 is the cloud metadata address"),
    ("http://169.254.169.254:80/latest/meta-data", "169.254.169.254 is the cloud metadata address"),
    ("http://[fd00:ec2::254]", "fd00:ec2::254 is the cloud metadata address"),
    ("http://[::ffff:169.254.169.254]", "169.254.169.254 is the cloud metadata address"),
    ("http://169.254.10.20:8080", "169.254.10.20 is link-local"),
    ("http://[fe80::1]", "fe80::1 is link-local"),
    ("http://0.0.0.0:8765", "0.0.0.0 is unspecified"),
    ("http://224.0.0.1", "224.0.0.1 is multicast"),
]
PRIVATE = [
    ("http://10.0.0.5", "10.0.0.5 is private"),
    ("http://172.16.3.4/api", "172.16.3.4 is private"),
    ("http://192.168.1.10", "192.168.1.10 is private"),
    ("http://[fd12:3456::1]", "fd12:3456::1 is private"),
    ("http://127.0.0.1:8765", "127.0.0.1 is loopback"),
    ("http://[::1]:8765", "::1 is loopback"),
    ("http://localhost:8765", "is loopback"),
]


def apply(tmp_path, base_url: str) -> str:
    path = tmp_path / "integrations.yaml"
    path.write_text(yaml.safe_dump({"destinations": [{"slug": "vendor", "base_url": base_url}]}, sort_keys=False))
    out = StringIO()
    call_command("integrations", "apply", str(path), stdout=out)
    return out.getvalue()


# --- when a destination is configured ---------------------------------------------------------------


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize(("base_url", "reason"), ALWAYS_REFUSED)
def test_link_local_and_metadata_addresses_are_refused_when_applied_whatever_the_setting(
    tmp_path, db, settings, allow_private, base_url, reason
):
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = allow_private

    with pytest.raises(CommandError) as refused:
        apply(tmp_path, base_url)

    assert f"base_url: {reason}" in str(refused.value)
    assert "egress policy" in str(refused.value)
    assert not Destination.objects.exists()


@pytest.mark.parametrize(("base_url", "reason"), PRIVATE)
def test_a_private_or_loopback_address_is_refused_unless_the_setting_allows_it(
    tmp_path, db, settings, base_url, reason
):
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, base_url)
    assert reason in str(refused.value)
    assert "OPSCONSOLE_EGRESS_ALLOW_PRIVATE" in str(refused.value)
    assert not Destination.objects.exists()

    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = True
    assert "destination vendor: created" in apply(tmp_path, base_url)


def test_a_name_that_does_not_resolve_now_is_taken_and_checked_at_each_call(tmp_path, db, settings):
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False
    assert "destination vendor: created" in apply(tmp_path, "https://vendor.invalid/api")


def test_the_admin_refuses_the_metadata_address(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", email=None, password=None))
    form = {
        "slug": "vendor",
        "base_url": "http://169.254.169.254/latest",
        "auth": "none",
        "auth_header": "",
        "secret_env": "",
        "connect_timeout_seconds": "3",
        "timeout_seconds": "10",
        "idempotency_header": "",
        "idempotency_key_retention_seconds": "",
        "rate_limit_per_second": "",
        "max_concurrency": "4",
        "breaker_threshold": "",
        "breaker_cooldown_seconds": "30",
    }

    refused = client.post("/admin/ledger/destination/add/", form)

    assert refused.status_code == 200
    assert "base_url: 169.254.169.254 is the cloud metadata address" in refused.content.decode()
    assert not Destination.objects.exists()


# --- at each call -------------------------------------------------------------------------------------


@pytest.fixture
def standin():
    server, url = start_in_thread()
    yield server, url
    server.shutdown()


def configure(base_url: str) -> None:
    """A destination and its action as rows (as one saved before the policy, or under another
    setting, would be): the call-time check is what stands between them and the network."""
    destination = Destination.objects.create(slug="vendor", base_url=base_url)
    HttpAction.objects.create(**ACTION | {"destination": destination})
    configured.loaded.forget()


def call_once(workspace):
    result = submit_event(
        workspace=workspace,
        raw={"action": "file-record", "delivery_id": "d-1", "data": {"request_id": "R-1"}},
        source="api",
    )
    assert result.outcome == "accepted", result
    process_due_operations(worker="w1")
    result.operation.refresh_from_db()
    return result.operation


def test_a_loopback_destination_is_refused_at_call_time_unless_allowed_and_never_retried(workspace, settings, standin):
    server, url = standin
    configure(url)
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False

    operation = call_once(workspace)

    assert operation.state == "needs_review"  # a definite failure: a person changes the destination
    [attempt] = Attempt.objects.filter(operation=operation)
    assert attempt.outcome == "permanent"
    assert "refused by the egress policy: 127.0.0.1 is loopback" in attempt.error_message
    assert server.store.stats()["requests"] == {}  # nothing reached the stand-in


def test_a_loopback_destination_is_called_when_the_setting_allows_it(workspace, settings, standin):
    server, url = standin
    configure(url)
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = True

    assert call_once(workspace).state == "succeeded"
    assert server.store.stats()["requests"] == {"POST /records": 1}


@pytest.mark.parametrize("allow_private", [False, True])
def test_the_metadata_address_is_refused_at_call_time(workspace, settings, allow_private):
    configure("http://169.254.169.254/latest")
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = allow_private

    operation = call_once(workspace)

    assert operation.state == "needs_review"
    [attempt] = Attempt.objects.filter(operation=operation)
    assert (attempt.outcome, attempt.error_message) == (
        "permanent",
        "refused by the egress policy: 169.254.169.254 is the cloud metadata address "
        "(docs/operations.md, Egress policy)",
    )


def answers(monkeypatch, host: str, *lookups: list[str]) -> None:
    """``host`` resolves to each of ``lookups`` in turn (the last one from then on), as a DNS server
    the test plays would answer it; every other name resolves as usual."""
    resolve, remaining = socket.getaddrinfo, list(lookups)

    def getaddrinfo(name, port, *args, **kwargs):
        if name != host:
            return resolve(name, port, *args, **kwargs)
        addresses = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_a_name_is_connected_to_at_the_address_that_was_checked(workspace, settings, standin, monkeypatch):
    """The name answers 127.0.0.1 once, then 127.0.0.2 (where nothing listens): a call that
    looked the name up again after checking it would connect there and fail. It reaches the
    stand-in, at the address it checked."""
    server, url = standin
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = True
    configure(url.replace("127.0.0.1", "vendor.invalid"))
    answers(monkeypatch, "vendor.invalid", ["127.0.0.1"], ["127.0.0.2"])

    assert call_once(workspace).state == "succeeded"
    assert server.store.stats()["requests"] == {"POST /records": 1}


def test_a_name_that_resolves_to_the_metadata_address_among_others_is_refused(
    workspace, settings, standin, monkeypatch
):
    server, url = standin
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = True
    configure(url.replace("127.0.0.1", "vendor.invalid"))
    answers(monkeypatch, "vendor.invalid", ["127.0.0.1", "169.254.169.254"])

    operation = call_once(workspace)

    assert operation.state == "needs_review"
    error = Attempt.objects.get().error_message
    assert "vendor.invalid resolves to 169.254.169.254, which is the cloud metadata address" in error
    assert server.store.stats()["requests"] == {}


@pytest.mark.parametrize("base_url", ["http://[zz]", "http://:80", "http://xn--"])
def test_a_url_without_a_host_a_call_can_reach_is_refused(tmp_path, db, base_url):
    with pytest.raises(CommandError) as refused:
        apply(tmp_path, base_url)

    assert "base_url: its host is not one a call can reach" in str(refused.value)
    assert not Destination.objects.exists()


# --- IPv4 addresses written in IPv6's other forms -----------------------------------------------------

# Each carries an IPv4 address a call to it reaches (through a NAT64 gateway, a 6to4 or Teredo relay,
# or a host that still routes the IPv4-compatible form): judged as that IPv4 address.
EMBEDDED = [
    ("64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:a9fe is 169.254.169.254, the cloud metadata address"),  # NAT64
    ("64:ff9b:1::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe is 169.254.169.254, the cloud metadata address"),  # RFC 8215
    ("64:ff9b::a9fe:1", "64:ff9b::a9fe:1 is 169.254.0.1, link-local"),
    ("::a9fe:a9fe", "::a9fe:a9fe is 169.254.169.254, the cloud metadata address"),  # IPv4-compatible
    ("2002:a9fe:a9fe::1", "2002:a9fe:a9fe::1 is 169.254.169.254, the cloud metadata address"),  # 6to4
    # Teredo: server 65.54.227.120, client 169.254.169.254 (its bits inverted in the last 32)
    ("2001:0:4136:e378:8000:63bf:5601:5601", "2001:0:4136:e378:8000:63bf:5601:5601 is 169.254.169.254, the cloud"),
    # Teredo: server 169.254.169.254, client 192.0.2.45
    ("2001:0:a9fe:a9fe:8000:63bf:3fff:fdd2", "2001:0:a9fe:a9fe:8000:63bf:3fff:fdd2 is 169.254.169.254, the cloud"),
    ("fec0::1", "fec0::1 is site-local (deprecated)"),
]
EMBEDDED_PRIVATE = [
    ("64:ff9b::a00:5", "64:ff9b::a00:5 is 10.0.0.5, private"),
    ("64:ff9b::7f00:1", "64:ff9b::7f00:1 is 127.0.0.1, loopback"),
    ("64:ff9b:1::c0a8:101", "64:ff9b:1::c0a8:101 is 192.168.1.1, private"),
    ("::7f00:1", "::7f00:1 is 127.0.0.1, loopback"),
    ("::a00:5", "::a00:5 is 10.0.0.5, private"),
    ("2002:a00:5::1", "2002:a00:5::1 is 10.0.0.5, private"),
    ("2002:7f00:1::1", "2002:7f00:1::1 is 127.0.0.1, loopback"),
]


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize(("address", "reason"), EMBEDDED)
def test_an_ipv4_address_in_an_ipv6_form_is_judged_as_the_ipv4_one(settings, allow_private, address, reason):
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = allow_private

    assert egress.judged(ipaddress.ip_address(address)).startswith(reason)


@pytest.mark.parametrize(("address", "reason"), EMBEDDED_PRIVATE)
def test_a_private_ipv4_address_in_an_ipv6_form_is_refused_unless_the_setting_allows_it(settings, address, reason):
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False
    assert (
        egress.judged(ipaddress.ip_address(address)) == f"{reason}, allowed only with OPSCONSOLE_EGRESS_ALLOW_PRIVATE=1"
    )

    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = True
    assert egress.judged(ipaddress.ip_address(address)) == ""


@pytest.mark.parametrize(
    "address",
    ["64:ff9b::808:808", "64:ff9b:1::808:808", "::808:808", "2002:808:808::1", "2606:4700::1111", "8.8.8.8"],
)
def test_a_public_ipv4_address_in_an_ipv6_form_is_allowed(settings, address):
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False

    assert egress.judged(ipaddress.ip_address(address)) == ""


def test_a_teredo_address_stays_private_even_when_what_it_carries_is_public(settings):
    """Teredo's prefix is not globally routable in its own right (RFC 4380 is a relay's business):
    judged as the IPv4 addresses it carries and as itself."""
    teredo = ipaddress.ip_address("2001:0:4136:e378:8000:63bf:3fff:fdd2")  # server 65.54.227.120, client 192.0.2.45
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False
    assert egress.judged(teredo).startswith(f"{teredo} is 192.0.2.45, private")

    teredo = ipaddress.ip_address("2001:0:4136:e378:8000:63bf:f7f7:f7f7")  # client 8.8.8.8
    assert egress.judged(teredo).startswith(f"{teredo} is private")
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = True
    assert egress.judged(teredo) == ""


@pytest.mark.parametrize("allow_private", [False, True])
def test_the_nat64_form_of_the_metadata_address_is_refused_when_applied(tmp_path, db, settings, allow_private):
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = allow_private

    with pytest.raises(CommandError) as refused:
        apply(tmp_path, "http://[64:ff9b::a9fe:a9fe]/latest")

    assert "base_url: 64:ff9b::a9fe:a9fe is 169.254.169.254, the cloud metadata address" in str(refused.value)
    assert not Destination.objects.exists()


def test_a_name_that_resolves_to_a_nat64_private_address_is_refused_at_call_time(workspace, settings, monkeypatch):
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False
    configure("http://vendor.invalid/api")
    answers(monkeypatch, "vendor.invalid", ["64:ff9b::a00:5"])

    operation = call_once(workspace)

    assert operation.state == "needs_review"
    assert (
        "vendor.invalid resolves to 64:ff9b::a00:5, which is 10.0.0.5, private" in Attempt.objects.get().error_message
    )


# --- through a proxy named in the environment ------------------------------------------------------------

PUBLIC = "93.184.215.14"  # a public address; the test's proxy connects to the stand-in whatever is named


@pytest.fixture
def proxy(standin, monkeypatch):
    """A forward proxy named in HTTP_PROXY and HTTPS_PROXY, passing every call on to the stand-in.
    This thread's client is made after the environment is set (a client reads it when made)."""
    server, url = standin
    forward = ForwardProxy(upstream=server.server_address[:2])
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", forward.url)
    monkeypatch.setenv("HTTPS_PROXY", forward.url)
    http.close_thread_client()
    yield forward
    http.close_thread_client()
    forward.stop()


def test_a_call_goes_through_the_proxy_in_the_environment(workspace, settings, standin, proxy, monkeypatch):
    """The proxy is at 127.0.0.1, where the operator put it: its own address is not the policy's to
    judge, the destination's is (a public one here)."""
    server, _ = standin
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False
    configure("http://vendor.example")
    answers(monkeypatch, "vendor.example", [PUBLIC])

    assert call_once(workspace).state == "succeeded"
    assert proxy.seen == ["POST http://vendor.example/records"]
    assert server.store.stats()["requests"] == {"POST /records": 1}


def test_a_host_named_in_no_proxy_is_called_directly(workspace, settings, standin, proxy, monkeypatch):
    server, url = standin
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = True
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    http.close_thread_client()
    configure(url)

    assert call_once(workspace).state == "succeeded"
    assert proxy.seen == []
    assert server.store.stats()["requests"] == {"POST /records": 1}


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_destination_that_resolves_to_the_metadata_address_is_refused_before_the_proxy_is_asked(
    workspace, settings, standin, proxy, monkeypatch, scheme
):
    server, _ = standin
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = True
    configure(f"{scheme}://vendor.example")
    answers(monkeypatch, "vendor.example", ["169.254.169.254"])

    operation = call_once(workspace)

    assert operation.state == "needs_review"
    [attempt] = Attempt.objects.filter(operation=operation)
    assert attempt.outcome == "permanent"
    assert "vendor.example resolves to 169.254.169.254, which is the cloud metadata address" in attempt.error_message
    assert proxy.seen == []
    assert server.store.stats()["requests"] == {}


def test_a_private_destination_is_refused_before_the_proxy_is_asked(workspace, settings, standin, proxy):
    server, url = standin
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False
    configure(url)

    operation = call_once(workspace)

    assert "refused by the egress policy: 127.0.0.1 is loopback" in Attempt.objects.get().error_message
    assert operation.state == "needs_review"
    assert proxy.seen == []


def test_a_name_that_does_not_resolve_here_is_not_handed_to_the_proxy(workspace, settings, standin, proxy):
    """Where it leads cannot be judged: the call is not sent (and is tried again later)."""
    settings.OPSCONSOLE_EGRESS_ALLOW_PRIVATE = False
    configure("http://vendor.invalid")

    call_once(workspace)

    [attempt] = Attempt.objects.all()
    assert attempt.outcome == "transient"
    assert "did not reach vendor.invalid" in attempt.error_message
    assert proxy.seen == []
