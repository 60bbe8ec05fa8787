"""Deliveries and attempts partitioned by ranges of operations (migration 0068): the database still
refuses what it refused, the sweep makes the next ranges, and retention drops a range whose
operations are all past their key window instead of deleting its rows (docs/retention.md)."""

from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import DatabaseError, IntegrityError, connection, transaction

from ledger import retention
from ledger.core import operation_partitions
from ledger.engine.processing import process_due_operations
from ledger.models import Attempt, Conflict, Delivery, Operation
from ledger.people import conflict_decisions
from ledger.states import TERMINAL_STATES
from ledger.sweep import sweep
from tests.conftest import event
from tests.ledger.conftest import START

KEY_WINDOW = timedelta(days=90)  # prepare-brief's (ActionDefinition)
WIDTH = 1000  # the narrowest range the function makes
SQL = Path(__file__).resolve().parents[3] / "ledger" / "core" / "sql"


def placed(table: str) -> dict[int, str]:
    """Each row of ``table`` by id, with the partition it is in."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, tableoid::regclass::text FROM {table}")
        return dict(cursor.fetchall())


def set_operation_ids(last: int) -> None:
    """The last operation id made is ``last``; and what the test wrote so far is checked as its
    commit would check it (its foreign keys are deferred to the commit, and a table with checks
    pending cannot be dropped: the arrivals a purge meets committed long before)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('ledger_operation_id_seq', %s)", [last])
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


@pytest.fixture
def narrow_ranges(db):
    """Ranges of WIDTH operations above the migration's (1,000,000 wide), the next operation the
    first of them; returns their first ids. The operation ids are put back afterwards (the
    sequence is outside the test's transaction; the ranges and rows are rolled back with it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value, is_called FROM ledger_operation_id_seq")
        saved = cursor.fetchone()
    top = operation_partitions.ranges()[-1].end
    operation_partitions.ensure(width=WIDTH, upto=top + 3 * WIDTH)
    set_operation_ids(top - 1)
    yield [top, top + WIDTH, top + 2 * WIDTH]
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval('ledger_operation_id_seq', %s, %s)", saved)


def finished_briefs(api, count: int, *, first: int = 1) -> list[Operation]:
    for n in range(first, first + count):
        assert api.post("/api/v1/events", event(f"d-{n}", request_id=f"R-{n}")).status_code == 201
    process_due_operations()
    operations = list(Operation.objects.filter(key__contains=":R-").order_by("pk"))
    assert {operation.state for operation in operations} == {"succeeded"}
    return operations


def test_the_rows_of_an_operation_are_in_its_ranges_partition(api, frozen, narrow_ranges):
    [operation] = finished_briefs(api, 1)
    refused = api.post("/api/v1/events", {"action": "prepare-brief", "delivery_id": "bad", "data": {}})

    assert refused.status_code == 422
    assert operation.pk == narrow_ranges[0]
    part = f"_ops_{narrow_ranges[0]}"
    assert set(placed("ledger_attempt").values()) == {f"ledger_attempt{part}"}
    deliveries = placed("ledger_delivery")
    assert deliveries[Delivery.objects.get(operation=operation).pk] == f"ledger_delivery{part}"
    # A refused delivery has no operation: the default partition.
    assert deliveries[Delivery.objects.get(operation=None).pk] == "ledger_delivery_default"


def test_a_second_try_under_one_claim_is_still_refused(api, frozen, narrow_ranges):
    [operation] = finished_briefs(api, 1)
    first = Attempt.objects.get(operation=operation)

    with pytest.raises(IntegrityError), transaction.atomic():
        Attempt.objects.create(operation=operation, number=2, fencing_token=first.fencing_token, started_at=START)


def test_a_conflict_naming_another_operations_delivery_is_refused(api, frozen):
    api.post("/api/v1/events", event("d-1"))
    api.post("/api/v1/events", event("d-2", request_id="R-43"))
    conflicting = api.post("/api/v1/events", event("d-3", title="Something else"))
    conflict = Conflict.objects.get(pk=conflicting.json()["conflict_id"])
    other = Delivery.objects.get(sender_delivery_id="d-2")

    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    with pytest.raises(IntegrityError), transaction.atomic():
        Conflict.objects.filter(pk=conflict.pk).update(delivery=other)


def test_the_sweep_makes_the_next_ranges_ahead(narrow_ranges):
    set_operation_ids(narrow_ranges[2] + 10)  # past the last narrow range: two more are due

    made = sweep().operation_partitions_created

    after = narrow_ranges[2] + WIDTH
    assert made == [
        f"ledger_{table}_ops_{first}" for first in (after, after + WIDTH) for table in ("delivery", "attempt")
    ]
    assert [found.first for found in operation_partitions.ranges()][-2:] == [after, after + WIDTH]
    assert sweep().operation_partitions_created == []


def test_purge_drops_a_range_all_past_its_key_window_and_deletes_no_row_of_it(api, frozen, narrow_ranges, alice):
    operations = finished_briefs(api, 3)
    conflicting = api.post("/api/v1/events", event("d-9", request_id="R-1", title="Something else"))
    conflict = Conflict.objects.get(pk=conflicting.json()["conflict_id"])
    conflict_decisions.dismiss_conflict(conflict, user=alice, reason="the first one stands")
    set_operation_ids(narrow_ranges[1] - 1)  # the range's last id made: no operation arrives in it

    report = retention.purge(as_of=START + KEY_WINDOW + timedelta(seconds=1), vacuum=False)

    first = narrow_ranges[0]
    # The migration's ranges below, made and empty, go too.
    assert report.ranges_dropped[-1] == f"operations {first}-{first + WIDTH - 1}"
    assert report.workspaces["demo"].deleted == 3
    assert not Operation.objects.filter(pk__in=[operation.pk for operation in operations]).exists()
    assert not Conflict.objects.exists()
    assert (Delivery.objects.count(), Attempt.objects.count()) == (0, 0)
    assert first not in [found.first for found in operation_partitions.ranges()]
    # Dropped, not deleted: no delivery or attempt row was deleted in any partition left.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(n_tup_del), 0) FROM pg_stat_xact_user_tables "
            "WHERE relname LIKE 'ledger_delivery%%' OR relname LIKE 'ledger_attempt%%'"
        )
        assert cursor.fetchone()[0] == 0


def test_the_purge_command_says_which_ranges_it_dropped(api, frozen, narrow_ranges):
    finished_briefs(api, 1)
    set_operation_ids(narrow_ranges[1] - 1)
    out = StringIO()
    frozen.move_to(START + KEY_WINDOW + timedelta(seconds=1), tick=False)

    call_command("purge", stdout=out)

    assert "Did redact 1 payloads and delete 1 tombstones" in out.getvalue()
    assert f"operations {narrow_ranges[0]}-{narrow_ranges[1] - 1}." in out.getvalue()
    assert "dropped whole (no row deleted)" in out.getvalue()


def test_a_range_with_an_unfinished_operation_stays_and_the_rest_go_row_by_row(api, frozen, narrow_ranges):
    operations = finished_briefs(api, 2)
    assert api.post("/api/v1/events", event("d-3", request_id="R-3")).status_code == 201  # pending
    set_operation_ids(narrow_ranges[1] - 1)

    report = retention.purge(as_of=START + KEY_WINDOW + timedelta(seconds=1), vacuum=False)

    assert f"operations {narrow_ranges[0]}-{narrow_ranges[1] - 1}" not in report.ranges_dropped
    assert report.workspaces["demo"].deleted == 2
    assert not Operation.objects.filter(pk__in=[operation.pk for operation in operations]).exists()
    assert Operation.objects.get().state == "pending"
    assert narrow_ranges[0] in [found.first for found in operation_partitions.ranges()]


def test_a_dry_run_names_the_range_it_would_drop_and_drops_nothing(api, frozen, narrow_ranges):
    finished_briefs(api, 2)
    set_operation_ids(narrow_ranges[1] - 1)

    report = retention.purge(as_of=START + KEY_WINDOW + timedelta(seconds=1), dry_run=True)

    assert report.ranges_dropped[-1] == f"operations {narrow_ranges[0]}-{narrow_ranges[1] - 1}"
    assert report.workspaces["demo"].deleted == 2
    assert Operation.objects.count() == 2
    assert narrow_ranges[0] in [found.first for found in operation_partitions.ranges()]


def test_a_range_within_its_key_window_is_not_looked_at(api, frozen, narrow_ranges):
    finished_briefs(api, 2)
    set_operation_ids(narrow_ranges[1] - 1)

    report = retention.purge(as_of=START + KEY_WINDOW - timedelta(seconds=1), vacuum=False)

    assert f"operations {narrow_ranges[0]}-{narrow_ranges[1] - 1}" not in report.ranges_dropped
    assert report.workspaces["demo"].deleted == 0
    assert Operation.objects.count() == 2


# --- what the database refuses, whoever calls it -----------------------------------------------


def drop(first: int) -> None:
    with transaction.atomic():
        operation_partitions.drop_range(first)


def test_a_range_not_yet_full_is_not_dropped(api, frozen, narrow_ranges):
    finished_briefs(api, 1)  # the range's last id is not made yet

    with pytest.raises(DatabaseError, match="not all made yet"):
        drop(narrow_ranges[0])


def test_a_range_with_an_unfinished_operation_is_not_dropped(api, frozen, narrow_ranges):
    assert api.post("/api/v1/events", event("d-1")).status_code == 201  # pending
    set_operation_ids(narrow_ranges[1] - 1)

    with pytest.raises(DatabaseError, match="not all finished"):
        drop(narrow_ranges[0])
    assert Delivery.objects.count() == 1


def test_a_range_whose_delivery_a_conflict_names_is_not_dropped(api, frozen, narrow_ranges):
    finished_briefs(api, 1)
    api.post("/api/v1/events", event("d-2", request_id="R-1", title="Something else"))
    set_operation_ids(narrow_ranges[1] - 1)

    with pytest.raises(DatabaseError, match='still referenced from table "ledger_conflict"'):
        drop(narrow_ranges[0])
    assert Delivery.objects.count() == 2


def test_no_range_is_the_history_or_the_default(narrow_ranges):
    with pytest.raises(DatabaseError, match="no range of operations begins at 5"):
        drop(5)


def test_the_functions_finished_states_are_the_ledgers():
    text = (SQL / "drop_operation_range.sql").read_text()
    listed = text.split("state NOT IN (", 1)[1].split(")", 1)[0]
    assert {name.strip(" '") for name in listed.split(",")} == {str(state) for state in TERMINAL_STATES}


# --- the migration, both ways, with rows -------------------------------------------------------

BEFORE = [("ledger", "0067_attempt_outcome_idx")]


def migrate(targets):
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_every_row_both_ways(api):
    from django.db.migrations.executor import MigrationExecutor

    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    finished_briefs(api, 2)
    api.post("/api/v1/events", event("d-9", request_id="R-1", title="Something else"))  # a conflict
    api.post("/api/v1/events", {"action": "prepare-brief", "delivery_id": "bad", "data": {}})  # refused
    rows = {table: sorted(placed(table)) for table in ("ledger_delivery", "ledger_attempt", "ledger_conflict")}
    assert [len(ids) for ids in rows.values()] == [4, 2, 1]

    migrate(BEFORE)
    try:
        assert {table: sorted(placed(table)) for table in rows} == rows
        assert set(placed("ledger_delivery").values()) == {"ledger_delivery"}  # a plain table again
    finally:
        migrate(latest)

    # Forward with rows: each table's rows are its history, a refused delivery in the default.
    assert {table: sorted(placed(table)) for table in rows} == rows
    refused = Delivery.objects.get(operation=None).pk
    assert {part for pk, part in placed("ledger_delivery").items() if pk != refused} == {"ledger_delivery_history"}
    assert placed("ledger_delivery")[refused] == "ledger_delivery_default"
    assert set(placed("ledger_attempt").values()) == {"ledger_attempt_history"}
    # The ids go on from where they were; the history ends where the first range begins.
    api.post("/api/v1/events", event("d-10", request_id="R-10"))
    newest = Delivery.objects.order_by("-id").first()
    assert newest.pk > max(rows["ledger_delivery"])
    assert placed("ledger_delivery")[newest.pk] == "ledger_delivery_history"
    assert operation_partitions.ranges()[0].first == 1_000_000
    # And the conflict still names its delivery, under the new foreign key.
    conflict = Conflict.objects.get()
    assert conflict.delivery.operation_id == conflict.operation_id
