"""A transaction PostgreSQL aborts for a deadlock is run again in place (``ledger.core.contention``); one
aborted every time is answered 503 ``busy`` with Retry-After, and nothing of it is kept.

Real deadlocks between two connections, and a real database error.
"""

import json
import logging
import threading

import pytest
from django.db import OperationalError, connection, transaction

from ledger.core import contention
from ledger.models import Delivery, Operation, Workspace

pytestmark = pytest.mark.django_db(transaction=True)


def lock_both(first: int, second: int, meet: threading.Barrier, runs: list) -> None:
    """One transaction: lock workspace ``first``, wait until the other thread holds ``second``,
    then lock it (on the first run only do both threads wait for each other)."""
    with transaction.atomic():
        runs.append(threading.current_thread().name)
        list(Workspace.objects.select_for_update().filter(pk=first))
        if len(runs) <= 2:
            meet.wait(timeout=30)
        list(Workspace.objects.select_for_update().filter(pk=second))
        Workspace.objects.filter(pk=first).update(approved_owners=["locked"])


def run_in_threads(*targets) -> list:
    failures = []

    def run(target):
        try:
            target()
        except Exception as exc:  # noqa: BLE001  collected and asserted on below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(target,), name=f"t{n}") for n, target in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread never finished"
    return failures


def two_workspaces() -> tuple[int, int]:
    return (
        Workspace.objects.create(slug="one", approved_owners=[]).pk,
        Workspace.objects.create(slug="two", approved_owners=[]).pk,
    )


def test_without_a_retry_two_transactions_locking_in_opposite_orders_deadlock():
    one, two = two_workspaces()
    meet, runs = threading.Barrier(2), []

    failures = run_in_threads(lambda: lock_both(one, two, meet, runs), lambda: lock_both(two, one, meet, runs))

    assert [contention.contention(exc) for exc in failures] == ["deadlock"]
    assert len(runs) == 2


def test_it_runs_the_deadlocked_transaction_again_and_both_commit(caplog):
    one, two = two_workspaces()
    meet, runs = threading.Barrier(2), []

    def retried(first, second):
        return lambda: contention.retried(lock_both, first, second, meet, runs, doing="locking two workspaces")

    with caplog.at_level(logging.INFO, logger="ledger"):
        failures = run_in_threads(retried(one, two), retried(two, one))

    assert failures == []
    # The victim ran twice; both changes committed. The survivor usually ran once, but a row lock is not
    # granted in queue order: the victim's second run may take its first row before the survivor does,
    # and deadlock it in turn (seen once on a loaded machine), so the survivor may run twice too.
    assert sorted(runs.count(name) for name in set(runs)) in ([1, 2], [2, 2])
    assert list(Workspace.objects.filter(pk__in=(one, two)).values_list("approved_owners", flat=True)) == [
        ["locked"],
        ["locked"],
    ]
    assert "locking two workspaces met a deadlock; running it again" in caplog.text


def test_inside_a_callers_transaction_it_runs_once_and_leaves_the_retry_to_the_caller():
    runs = []
    with transaction.atomic():
        assert contention.retried(lambda: runs.append(1) or "done", doing="inside") == "done"
    assert runs == [1]


def test_other_database_errors_are_not_run_again():
    runs = []

    def broken():
        runs.append(1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1/0")

    with pytest.raises(Exception, match="division by zero"):
        contention.retried(broken, doing="dividing")
    assert runs == [1]


@pytest.fixture
def always_deadlocked():
    """Every new operation row meets a deadlock, as PostgreSQL reports one (SQLSTATE 40P01), raised
    by the database itself; counts the tries in a sequence."""
    with connection.cursor() as cursor:
        cursor.execute("""
            CREATE SEQUENCE test_deadlocked_tries;
            CREATE FUNCTION test_deadlocked() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM nextval('test_deadlocked_tries');
                RAISE EXCEPTION 'deadlock detected (made by the test)' USING ERRCODE = 'deadlock_detected';
            END $$;
            CREATE TRIGGER test_deadlocked BEFORE INSERT ON ledger_operation
                FOR EACH ROW EXECUTE FUNCTION test_deadlocked();""")

    def tries() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT last_value, is_called FROM test_deadlocked_tries")
            value, called = cursor.fetchone()
            return value if called else 0

    yield tries
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER test_deadlocked ON ledger_operation; DROP FUNCTION test_deadlocked(); "
            "DROP SEQUENCE test_deadlocked_tries;"
        )


@pytest.mark.parametrize("action", ["prepare-brief", "update-status"])
def test_a_deadlock_that_persists_is_answered_503_busy_with_retry_after(
    client, token, always_deadlocked, caplog, action
):
    client.raise_request_exception = False
    data = (
        {"request_id": "R-7", "version": 2, "title": "Busy", "owner": "ops"}
        if action == "prepare-brief"
        else {"request_id": "R-7", "version": 2, "status": "closed"}
    )

    with caplog.at_level(logging.INFO, logger="ledger"):
        response = client.post(
            "/api/v1/events",
            json.dumps({"action": action, "data": data}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["status"] == "busy"
    assert "resending is safe" in response.json()["detail"]
    assert always_deadlocked() == contention.TRIES
    assert not Operation.objects.exists()
    assert not Delivery.objects.exists()
    assert "met a deadlock; running it again" in caplog.text
    assert "database busy: deadlock persisted; answered 503 busy" in caplog.text


def test_a_lost_database_is_still_unavailable_not_busy():
    exc = OperationalError("connection refused")
    assert contention.contention(exc) == ""
