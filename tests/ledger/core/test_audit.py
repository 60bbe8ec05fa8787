"""Audit events are append-only: in the ORM, and in the database itself."""

import pytest
from django.db import DatabaseError, connection, transaction

from ledger.core.transitions import record_audit_event
from ledger.models import AuditEvent


@pytest.fixture
def audit_event(workspace):
    return record_audit_event(actor="test", kind="paused", workspace=workspace, message="global")


def test_it_appends_an_audit_event(audit_event):
    assert AuditEvent.objects.get(pk=audit_event.pk).kind == "paused"


def test_it_refuses_to_save_a_changed_event(audit_event):
    audit_event.kind = "resumed"
    with pytest.raises(PermissionError, match="append-only"):
        audit_event.save()
    assert AuditEvent.objects.get(pk=audit_event.pk).kind == "paused"


def test_it_refuses_to_delete_an_event(audit_event):
    with pytest.raises(PermissionError, match="append-only"):
        audit_event.delete()
    assert AuditEvent.objects.filter(pk=audit_event.pk).exists()


def test_it_refuses_queryset_update_and_delete(audit_event):
    with pytest.raises(PermissionError, match="append-only"):
        AuditEvent.objects.filter(pk=audit_event.pk).update(kind="resumed")
    with pytest.raises(PermissionError, match="append-only"):
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.get(pk=audit_event.pk).kind == "paused"


def test_it_refuses_a_raw_sql_update_in_the_database(audit_event):
    """The trigger holds even for code that goes around the ORM."""
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_auditevent SET kind = 'resumed' WHERE id = %s", [audit_event.pk])
    assert AuditEvent.objects.get(pk=audit_event.pk).kind == "paused"


def test_it_refuses_a_raw_sql_delete(audit_event):
    """A row trigger refuses DELETE too."""
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM ledger_auditevent WHERE id = %s", [audit_event.pk])
    assert AuditEvent.objects.filter(pk=audit_event.pk).exists()
