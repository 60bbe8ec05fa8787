"""The webhook sender a person runs from the checkout (opsconsole/send_webhook.py): what it sends is
signed as Standard Webhooks says, and input it cannot send is refused before anything is sent, saying
what to fix. That the demo's server takes what it sends: tests/opsconsole/test_demo.py."""

import json

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from opsconsole import send_webhook

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
URL = "http://127.0.0.1:1/api/v1/hooks/billing"  # nothing listens: a test that got this far would fail


@pytest.fixture(autouse=True)
def no_secret_in_the_environment(monkeypatch):
    monkeypatch.delenv(send_webhook.SECRET_ENV, raising=False)


def answering(status: int, sent: dict):
    """httpx.post as a server answering ``status``; what was sent lands in ``sent``."""

    def post(url, *, content, headers, timeout):
        sent.update(url=url, content=content, headers=headers)
        return httpx.Response(status, json={"status": "ignored"}, request=httpx.Request("POST", url))

    return post


def refused(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit:
        send_webhook.main(["--url", URL, *argv])
    assert exit.value.code == 2
    return capsys.readouterr().err


def test_it_sends_the_body_signed_by_the_library_with_the_standard_headers(monkeypatch, capsys):
    sent: dict = {}
    monkeypatch.setattr(httpx, "post", answering(202, sent))
    monkeypatch.setenv(send_webhook.SECRET_ENV, SECRET)

    code = send_webhook.main(["--url", URL, "--id", "msg_1", '{"type": "customer.created"}'])

    assert code == 0
    assert sent["content"] == b'{"type": "customer.created"}'  # as given, byte for byte
    assert sent["headers"]["webhook-id"] == "msg_1"
    assert sent["headers"]["Content-Type"] == "application/json"
    Webhook(SECRET).verify(sent["content"], sent["headers"])
    assert capsys.readouterr().out.splitlines() == ["202 Accepted", '{"status":"ignored"}']


def test_the_invoice_paid_example_carries_its_own_time_in_the_standard_payload_shape(monkeypatch):
    sent: dict = {}
    monkeypatch.setattr(httpx, "post", answering(201, sent))

    assert send_webhook.main(["--url", URL, "--secret", SECRET, "--example", "invoice.paid"]) == 0

    body = json.loads(sent["content"])
    assert (body["type"], body["data"]["invoice_id"]) == ("invoice.paid", "INV-7")
    assert body["timestamp"].endswith("Z")
    assert sent["headers"]["webhook-id"].startswith("msg_")  # a new one each run, when not given


def test_a_body_that_is_not_json_is_refused_before_sending(capsys, tmp_path):
    broken = tmp_path / "event.json"
    broken.write_text('{"type": ')

    assert "error: the body is not JSON: Expecting value" in refused(capsys, "--secret", SECRET, "nope")
    assert "error: the body is not JSON" in refused(capsys, "--secret", SECRET, "--body", str(broken))
    assert "can't open" in refused(capsys, "--secret", SECRET, "--body", str(tmp_path / "missing.json"))


def test_without_a_secret_it_says_where_to_give_one(capsys):
    message = refused(capsys, "--example", "invoice.paid")

    assert f"error: no secret: pass --secret whsec_... or set {send_webhook.SECRET_ENV}" in message


def test_a_secret_that_is_no_standard_webhooks_secret_is_refused(capsys):
    assert "error: the secret is not a Standard Webhooks secret" in refused(
        capsys, "--secret", "whsec_!!!", "--example", "invoice.paid"
    )


def test_it_needs_exactly_one_body(capsys):
    assert "one of the arguments JSON --body --example is required" in refused(capsys, "--secret", SECRET)
    assert "not allowed with argument" in refused(capsys, "--secret", SECRET, "{}", "--example", "invoice.paid")


def test_a_refusal_or_no_answer_exits_1(monkeypatch, capsys):
    assert send_webhook.main(["--url", URL, "--secret", SECRET, "{}"]) == 1
    assert f"could not send to {URL}" in capsys.readouterr().err

    monkeypatch.setattr(httpx, "post", answering(401, {}))
    assert send_webhook.main(["--url", URL, "--secret", SECRET, "{}"]) == 1
    assert capsys.readouterr().out.startswith("401 Unauthorized")
