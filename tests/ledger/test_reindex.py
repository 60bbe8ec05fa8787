"""Rebuilding the purged tables' bloated indexes (ledger/reindex.py): after many operations are
deleted, ``manage.py reindex`` shrinks their indexes and the queries still use them; the INVALID
leftovers of a failed rebuild are dropped; two runs never overlap; ``--dry-run`` changes nothing.

REINDEX CONCURRENTLY cannot run inside a transaction block, hence transactional tests."""

from importlib import import_module
from io import StringIO

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django_q.models import Schedule

from ledger import reindex
from ledger.engine.schedules import REINDEX_SCHEDULE
from ledger.models import Operation
from tests.faults.qcluster import wait_for
from tests.ledger.conftest import succeeded_briefs

KEY_INDEX = "operation_unique_key"  # the (workspace, key) constraint's index
LEFTOVER = "ledger_operation_action_ccnew"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def purged(workspace):
    """20,000 operations inserted, all but 100 of them deleted, then VACUUM ANALYZE, as a purge leaves
    the table: its indexes as large as before, nearly empty."""
    succeeded_briefs(workspace, (f"{'kept' if n % 200 == 0 else 'gone'}-{n}" for n in range(20_000)), batch_size=2_000)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM ledger_operation WHERE key LIKE 'gone-%%'")
        cursor.execute("VACUUM ANALYZE ledger_operation")
    return workspace


def sizes() -> dict[str, int]:
    with connection.cursor() as cursor:
        return {index.name: index.size for index in reindex.index_sizes(cursor, ["ledger_operation"])}


def plan(workspace, key: str) -> str:
    queryset = Operation.objects.filter(workspace=workspace, key=key)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small would be read whole otherwise
        return queryset.explain()


def uses(plan: str, index: str) -> bool:
    return "Seq Scan" not in plan and (f"Index Scan using {index} " in plan or f"Index Scan on {index} " in plan)


def session_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return bool(cursor.fetchone()[0])


def leave_an_invalid_leftover() -> None:
    """What a REINDEX CONCURRENTLY that failed leaves: an INVALID index (here: a unique build that
    met duplicates)."""
    with connection.cursor() as cursor, pytest.raises(Exception, match="could not create unique index"):
        cursor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {LEFTOVER} ON ledger_operation (action)")


def exists(index: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [index])
        return cursor.fetchone()[0]


def test_it_shrinks_the_indexes_of_a_purged_table_and_the_queries_still_use_them(purged):
    before = sizes()
    name = KEY_INDEX
    assert uses(plan(purged, "kept-200"), name)

    out = StringIO()
    call_command("reindex", "--min-waste-mb", "0", stdout=out)

    after = sizes()
    assert after[name] < before[name] / 4, (before[name], after[name])
    assert set(after) == set(before)  # every index rebuilt in place, none lost or left over
    assert f"rebuilt {name}" in out.getvalue()
    assert uses(plan(purged, "kept-200"), name)
    assert Operation.objects.get(workspace=purged, key="kept-200").key == "kept-200"


def test_it_keeps_an_index_that_is_not_bloated(purged):
    call_command("reindex", "--min-waste-mb", "0", stdout=StringIO())
    rebuilt = sizes()

    report = reindex.reindex(min_waste=0, tables=["ledger_operation"])

    assert report.rebuilt == []
    assert {index.name for index in report.kept} == set(rebuilt)
    assert sizes() == rebuilt


def test_it_rebuilds_nothing_that_wastes_less_than_the_floor(purged):
    before = sizes()

    report = reindex.reindex(tables=["ledger_operation"])  # the default floor: 64 MB

    assert report.rebuilt == []
    assert sizes() == before


def test_it_drops_the_invalid_leftover_of_a_failed_rebuild_first_and_says_so(purged):
    leave_an_invalid_leftover()
    assert exists(LEFTOVER)

    out = StringIO()
    call_command("reindex", stdout=out)

    assert not exists(LEFTOVER)
    assert f"dropping {LEFTOVER}: INVALID, left by a rebuild that failed" in out.getvalue()
    assert f"dropped 1 invalid leftovers: {LEFTOVER}" in out.getvalue()


def test_a_second_run_while_one_holds_the_lock_says_it_is_busy_and_does_nothing(purged):
    leave_an_invalid_leftover()
    before = sizes()
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [reindex.LOCK_KEY])
            cursor.execute("SELECT pg_backend_pid()")
            other_pid = cursor.fetchone()[0]
        with pytest.raises(CommandError, match="Another reindex is running"):
            call_command("reindex", "--min-waste-mb", "0", stdout=StringIO())
        assert sizes() == before
        assert exists(LEFTOVER)
    finally:
        other.close()

    # The lock goes with the other session, once its server process has ended (a moment after the
    # client closed: longer on a loaded machine).
    wait_for(lambda: not session_alive(other_pid), timeout=30, message="the other session did not end")
    assert reindex.reindex(min_waste=0).busy is False


def run_for_two_seconds_while_the_table_is_held() -> tuple[reindex.ReindexReport, StringIO]:
    """A run of two seconds over ledger_operation while another session holds the table's SHARE
    UPDATE EXCLUSIVE lock (as a VACUUM or a long rebuild would): what it reported, what it said."""
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("LOCK TABLE ledger_operation IN SHARE UPDATE EXCLUSIVE MODE")
        out = StringIO()
        return reindex.reindex(min_waste=0, tables=["ledger_operation"], seconds=2, progress=out.write), out
    finally:
        other.close()


def test_a_run_with_a_time_limit_cancels_a_rebuild_that_outlasts_it_and_names_what_it_left(purged):
    before = sizes()

    report, out = run_for_two_seconds_while_the_table_is_held()

    assert report.rebuilt == []
    assert KEY_INDEX in {index.name for index in report.left}
    assert "no time left: run manage.py reindex" in report.summary()
    assert "not rebuilt within the time left; run manage.py reindex" in out.getvalue()
    assert sizes() == before
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_index WHERE NOT indisvalid")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"  # the session's own again


def test_a_run_with_a_time_limit_leaves_a_leftover_whose_table_is_held_rather_than_wait_past_it(purged):
    leave_an_invalid_leftover()

    report, out = run_for_two_seconds_while_the_table_is_held()

    assert LEFTOVER not in report.dropped
    assert f"{LEFTOVER}: its table is held by another session; left for the next run" in out.getvalue()
    assert exists(LEFTOVER)
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"  # the session's own again
    call_command("reindex", "--min-waste-mb", "0", stdout=StringIO())  # the next run, unhindered
    assert not exists(LEFTOVER)


def test_the_dry_run_lists_each_index_and_its_size_and_changes_nothing(purged):
    leave_an_invalid_leftover()
    before = sizes()
    name = KEY_INDEX

    out = StringIO()
    call_command("reindex", "--dry-run", "--min-waste-mb", "0", stdout=out)

    assert sizes() == before
    assert exists(LEFTOVER)
    text = out.getvalue()
    assert f"would drop {LEFTOVER}" in text
    assert f"would rebuild {name} (ledger_operation): " in text
    # A partitioned table's indexes are its partitions'.
    assert "keep ledger_attempt_default_pkey (ledger_attempt_default): " in text


def test_it_refuses_to_run_inside_a_transaction(db):
    with transaction.atomic(), pytest.raises(RuntimeError, match="cannot run inside a transaction"):
        reindex.reindex()


def test_the_scheduled_task_reports_what_it_did(purged):
    from ledger import tasks

    assert tasks.reindex().startswith("rebuilt 0 indexes")  # nothing wastes the default 64 MB here


def test_the_reindex_runs_weekly_on_the_cluster(db):
    # Written by migration 0060; a transactional test may have flushed it since, so the migration's
    # own step writes it again here.
    migration = import_module("ledger.migrations.0060_reindex_schedule")
    [step] = [operation.code for operation in migration.Migration.operations if hasattr(operation, "code")]
    assert step is migration.create_schedule
    step(apps, None)
    schedule = Schedule.objects.get(name=REINDEX_SCHEDULE)
    assert (schedule.func, schedule.minutes, schedule.repeats) == ("ledger.tasks.reindex", 7 * 24 * 60, -1)
