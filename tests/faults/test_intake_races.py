"""Concurrent intake of one key: the database, not the code, decides who reserves it.

32 threads are released together by a barrier, each on its own PostgreSQL connection.
"""

import threading
from collections import Counter

import pytest
from django.db import connection

from ledger import intake
from ledger.models import AuditEvent, Conflict, Delivery, Operation
from tests.conftest import event

THREADS = 32

def submit_together(workspace, bodies):
    """Submit each body from its own thread, all released at once; return outcomes and exceptions."""
    barrier = threading.Barrier(len(bodies), timeout=60)
    outcomes, failures = [], []
    lock = threading.Lock()

    def submit(body):
        try:
            barrier.wait()
            result = intake.submit_event(workspace=workspace, raw=body, source="api")
            with lock:
                outcomes.append(result.outcome)
        except Exception as exc:  # noqa: BLE001  (collected and asserted on below)
            with lock:
                failures.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a submission never finished"
    return Counter(outcomes), failures


@pytest.mark.django_db(transaction=True)
def test_it_reserves_one_operation_for_32_concurrent_deliveries_of_one_event(workspace):
    outcomes, failures = submit_together(workspace, [event(f"delivery-{i}") for i in range(THREADS)])

    assert failures == []
    assert outcomes == {"accepted": 1, "duplicate": THREADS - 1}
    operation = Operation.objects.get()
    assert operation.key == "demo:R-42:v3:prepare-brief"
    assert Delivery.objects.count() == THREADS
    assert Counter(Delivery.objects.values_list("outcome", flat=True)) == {"accepted": 1, "duplicate": THREADS - 1}
    assert Delivery.objects.filter(operation=operation).count() == THREADS
    # The one accepted delivery is the one whose payload the operation holds.
    assert AuditEvent.objects.filter(operation=operation, kind="reserved").count() == 1
    assert Conflict.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_it_blocks_31_of_32_concurrent_changed_payloads_as_conflicts(workspace):
    bodies = [event(f"delivery-{i}", title=f"Title number {i}") for i in range(THREADS)]
    outcomes, failures = submit_together(workspace, bodies)

    assert failures == []
    assert outcomes == {"accepted": 1, "conflict": THREADS - 1}
    operation = Operation.objects.get()
    assert Delivery.objects.count() == THREADS
    assert Conflict.objects.count() == THREADS - 1
    assert set(Conflict.objects.values_list("operation", flat=True)) == {operation.pk}
    recorded_title = operation.payload["title"]
    incoming_titles = {c.incoming_payload["title"] for c in Conflict.objects.all()}
    assert incoming_titles == {body["data"]["title"] for body in bodies} - {recorded_title}
    for conflict in Conflict.objects.all():
        assert conflict.differences == [
            {"field": "title", "recorded": recorded_title, "incoming": conflict.incoming_payload["title"]}
        ]
