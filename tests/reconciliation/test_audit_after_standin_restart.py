"""A stand-in destination restarted on its record file (``--store``, as `make demo` runs it) still has
every record the ledger holds: the reconciliation audit after the restart finds no mismatch, and the
records made after it have ids of their own (a record id never names two operations)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import Operation
from reconciliation.models import Mismatch
from reconciliation.two_way_audit import run_audit
from tests.reconciliation.test_audit import succeeded
from tests.standin.test_persistence import StandinProcess

pytestmark = [pytest.mark.processes, pytest.mark.django_db]


def test_the_audit_after_a_restart_finds_nothing_and_ids_do_not_repeat(workspace, settings, tmp_path, time_machine):
    store = tmp_path / "standin.sqlite3"
    settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS = 5.0
    standin = StandinProcess(store)
    try:
        settings.OPSCONSOLE_STANDIN_URL = standin.url
        before = [
            succeeded(workspace, "file-ticket", "R-1"),
            succeeded(workspace, "send-notice", "R-2"),
            succeeded(workspace, "send-notice", "R-3"),
        ]
    finally:
        standin.stop()

    standin = StandinProcess(store)
    try:
        settings.OPSCONSOLE_STANDIN_URL = standin.url
        after = succeeded(workspace, "file-ticket", "R-4")
        time_machine.move_to(timezone.now() + timedelta(minutes=1))  # past the actions' settle time

        run = run_audit()
    finally:
        standin.stop()

    assert run.status == "succeeded", run.error
    assert (run.missing_at_destination, run.unknown_to_ledger, run.content_differs) == (0, 0, 0)
    assert run.operations_checked == 4
    assert run.records_seen == 4
    assert not Mismatch.objects.exists()
    ids = [operation.external_id for operation in before] + [after.external_id]
    assert len(set(ids)) == 4, ids
    assert Operation.objects.filter(external_id=after.external_id).count() == 1
