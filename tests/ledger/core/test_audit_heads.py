"""Chain heads exported outside the database (a signed JSON line appended to a file or POSTed to an
endpoint), and ``verify_audit --heads FILE`` holding the database to them: the newest events cut
off, or a tail rewritten, are found even though what is left of the chain links up."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django_q.models import Schedule

from ledger import tasks
from ledger.engine.schedules import AUDIT_HEADS_SCHEDULE, ensure_audit_heads_schedule
from ledger.models import AuditEvent
from tests.ledger.core.test_audit_chain import tamper
from tests.ledger.core.test_audit_keyed import make_history


def verify(*args) -> str:
    out = StringIO()
    call_command("verify_audit", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def heads_file(tmp_path, settings):
    path = tmp_path / "audit-heads.jsonl"
    settings.OPSCONSOLE_AUDIT_HEADS_TO = f"file://{path}"
    return path


def test_it_appends_one_signed_line_per_export(workspace, heads_file):
    make_history(workspace)
    newest = AuditEvent.objects.filter(workspace=workspace).order_by("-id").first()

    call_command("export_audit_heads", stdout=StringIO())
    tasks.export_audit_heads()  # the schedule's task: a second line

    lines = [json.loads(line) for line in heads_file.read_text().splitlines()]
    assert len(lines) == 2
    assert {"at", "key_id", "heads", "mac"} <= set(lines[0])
    assert {"workspace_id": workspace.pk, "event_id": newest.pk, "hash": newest.hash} in lines[0]["heads"]
    assert any(head["workspace_id"] is None for head in lines[0]["heads"])  # the global chain (the pause)


def test_it_finds_the_newest_event_deleted_with_the_heads(workspace, heads_file):
    make_history(workspace)
    call_command("export_audit_heads", stdout=StringIO())
    newest = AuditEvent.objects.filter(workspace=workspace).order_by("-id").first()

    tamper("DELETE FROM ledger_auditevent WHERE id = %s", [newest.pk])

    assert verify("--no-heads").splitlines()[-1].startswith("Audit trail intact:")  # what is left links up
    for args in [(), ("--heads", str(heads_file))]:  # OPSCONSOLE_AUDIT_HEADS_TO's file by default
        with pytest.raises(
            CommandError, match=f"exported head of workspace demo, event {newest.pk}, is no longer on its chain"
        ):
            verify(*args)


def test_it_finds_a_cut_off_tail_with_the_heads(workspace, heads_file):
    make_history(workspace)
    call_command("export_audit_heads", stdout=StringIO())
    tail = list(AuditEvent.objects.filter(workspace=workspace).order_by("-id")[:3])

    tamper("DELETE FROM ledger_auditevent WHERE id IN (%s, %s, %s)", [event.pk for event in tail])

    assert verify("--no-heads").splitlines()[-1].startswith("Audit trail intact:")
    with pytest.raises(CommandError, match=f"event {tail[0].pk}, is no longer on its chain"):
        verify()


def test_it_accepts_heads_behind_the_current_ones(workspace, heads_file):
    make_history(workspace, requests=("R-1",))
    call_command("export_audit_heads", stdout=StringIO())
    make_history(workspace, requests=("R-2", "R-3"))
    call_command("export_audit_heads", stdout=StringIO())

    output = verify("--heads", str(heads_file))

    assert "exported heads: 2 lines, all on their chains" in output
    assert output.splitlines()[-1].startswith("Audit trail intact:")


def test_it_refuses_a_heads_line_whose_signature_does_not_match(workspace, heads_file):
    make_history(workspace)
    call_command("export_audit_heads", stdout=StringIO())
    line = json.loads(heads_file.read_text())
    line["heads"][0]["event_id"] -= 1
    heads_file.write_text(json.dumps(line) + "\n")

    with pytest.raises(CommandError, match="line 1 .*signature does not match"):
        verify("--heads", str(heads_file))


def test_it_checks_heads_signed_under_a_retired_key(workspace, heads_file, settings):
    make_history(workspace)
    call_command("export_audit_heads", stdout=StringIO())
    settings.OPSCONSOLE_AUDIT_OLD_KEYS = {settings.OPSCONSOLE_AUDIT_KEY_ID: settings.OPSCONSOLE_AUDIT_KEY}
    settings.OPSCONSOLE_AUDIT_KEY, settings.OPSCONSOLE_AUDIT_KEY_ID = "the-next-key-0123456789", "next"

    assert "all on their chains" in verify("--heads", str(heads_file))

    line = json.loads(heads_file.read_text())
    heads_file.write_text(json.dumps(line | {"key_id": "retired-and-gone"}) + "\n")
    with pytest.raises(CommandError, match="line 1 is signed under audit key id .*, which is not configured"):
        verify("--heads", str(heads_file))


def test_it_posts_the_line_to_an_http_endpoint(workspace, settings):
    received = []

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append((self.headers["Content-Type"], self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        settings.OPSCONSOLE_AUDIT_HEADS_TO = f"http://127.0.0.1:{server.server_port}/heads"
        make_history(workspace)
        call_command("export_audit_heads", stdout=StringIO())
    finally:
        server.shutdown()
        server.server_close()

    [(content_type, body)] = received
    assert content_type == "application/json"
    assert json.loads(body)["heads"]


def test_the_export_refuses_without_a_destination(workspace, settings):
    settings.OPSCONSOLE_AUDIT_HEADS_TO = ""
    with pytest.raises(CommandError, match="OPSCONSOLE_AUDIT_HEADS_TO"):
        call_command("export_audit_heads", stdout=StringIO())


def test_a_schedule_exports_the_heads(db):
    ensure_audit_heads_schedule(Schedule)  # migration 0030 ran it; a transactional test may have flushed it since
    ensure_audit_heads_schedule(Schedule)
    [schedule] = Schedule.objects.filter(name=AUDIT_HEADS_SCHEDULE)
    assert schedule.func == "ledger.tasks.export_audit_heads"
    assert schedule.schedule_type == Schedule.MINUTES
