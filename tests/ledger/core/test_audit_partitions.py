"""The audit trail partitioned by month (migration 0061): events land in their month's partition,
the sweep makes the next months' ahead, a chain's months never go back (so each month holds one
stretch of every chain), and the oldest month is archived to a file (``manage.py archive_audit``)
that verifies on its own, while the live chains verify from where it ends."""

import json
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ledger.core import audit_chain, audit_partitions
from ledger.models import AuditArchive, AuditEvent, Workspace
from ledger.sweep import sweep
from tests.ledger.core.test_audit_chain import tamper


def month_start(moment: datetime, months: int = 0) -> datetime:
    first = moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    year, month = divmod(first.month - 1 + months, 12)
    return first.replace(year=first.year + year, month=month + 1)


def partition_of(event: AuditEvent) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM ledger_auditevent WHERE id = %s", [event.pk])
        return cursor.fetchone()[0]


def append(workspace_id, kind: str, at: datetime | None = None) -> AuditEvent:
    [event] = audit_chain.append([AuditEvent(workspace_id=workspace_id, actor="t", kind=kind, created_at=at)])
    return event


def drop_by_hand(name: str) -> None:
    """A partition detached and dropped as the tables' owner could, outside ``archive_audit``."""
    tamper("SET CONSTRAINTS ALL IMMEDIATE", [])
    tamper(f"ALTER TABLE ledger_auditevent DETACH PARTITION {name}", [])
    tamper(f"DROP TABLE {name}", [])


def verify(*args) -> str:
    out = StringIO()
    call_command("verify_audit", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def quiet_workspace(db):
    """A workspace whose chain is empty (made without the service, which would write an event now)."""
    return Workspace.objects.create(slug="quiet", approved_owners=[], retry_budget_per_hour=10)


@pytest.fixture
def past_months(db):
    """Partitions for the five months before this one (a new installation's trail starts with
    this month's)."""
    now = timezone.now()
    audit_partitions.ensure_range(month_start(now, -5), month_start(now, -1))


def test_an_event_lands_in_its_month_and_the_next_months_are_there(workspace):
    now = timezone.now()
    event = append(workspace.pk, "paused")

    assert partition_of(event) == f"ledger_auditevent_p{now:%Y%m}"
    names = [part.name for part in audit_partitions.partitions()]
    for months in range(4):
        assert f"ledger_auditevent_p{month_start(now, months):%Y%m}" in names
    assert audit_partitions.DEFAULT not in names  # no range of time: never archived


def test_each_partition_refuses_changes_and_truncate_as_the_trail_does(workspace):
    event = append(workspace.pk, "paused")
    name = partition_of(event)
    with connection.cursor() as cursor:  # the append's deferred foreign key checked now: no TRUNCATE waits on it
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

    unkeyed = (
        f"INSERT INTO {name} (id, actor, kind, from_state, to_state, error_category, message, created_at, "
        "prev_hash, hash, hash_key) VALUES (-5, 'x', 'k', '', '', '', '', now(), '', '', '')"
    )
    for statement, refusal in [
        (f"UPDATE {name} SET message = 'x'", "append-only: UPDATE refused"),
        (f"DELETE FROM {name}", "append-only: DELETE refused"),
        (f"TRUNCATE {name}", "append-only: TRUNCATE refused"),
        (unkeyed, "no MAC under an audit key"),
    ]:
        with pytest.raises(DatabaseError, match=refusal), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)
    assert AuditEvent.objects.filter(pk=event.pk, message=event.message).exists()


def test_the_sweep_makes_the_months_ahead_where_missing(db):
    furthest = f"ledger_auditevent_p{month_start(timezone.now(), 3):%Y%m}"
    drop_by_hand(furthest)

    assert sweep().audit_partitions_created == [furthest]
    assert sweep().audit_partitions_created == []


def test_a_month_whose_events_went_to_the_default_partition_is_held_back(quiet_workspace):
    far = datetime(2040, 3, 5, tzinfo=UTC)
    event = append(quiet_workspace.pk, "paused", far)
    assert partition_of(event) == audit_partitions.DEFAULT

    made = audit_partitions.ensure_range(datetime(2040, 2, 1, tzinfo=UTC), datetime(2040, 4, 1, tzinfo=UTC))

    assert made.created == ["ledger_auditevent_p204002", "ledger_auditevent_p204004"]
    assert made.held_back == ["ledger_auditevent_p204003"]
    assert partition_of(event) == audit_partitions.DEFAULT  # where it was, nothing lost


def test_a_chain_never_goes_back_a_month(quiet_workspace, past_months):
    """An appender that set its time in a month before the chain's head (it got the chain's lock
    after another had written in the new month) is sealed at the start of the head's month; within
    a month, a time stays as it was set."""
    this_month = month_start(timezone.now())
    later = append(quiet_workspace.pk, "paused", this_month + timedelta(seconds=2))
    same_month = append(quiet_workspace.pk, "resumed", this_month + timedelta(seconds=1))
    month_before = append(quiet_workspace.pk, "paused", this_month - timedelta(seconds=1))

    assert same_month.created_at == this_month + timedelta(seconds=1)
    assert month_before.created_at == this_month
    assert AuditEvent.objects.get(pk=month_before.pk).created_at == this_month
    assert partition_of(month_before) == partition_of(later)
    assert month_before.prev_hash == same_month.hash
    assert verify("--no-heads").splitlines()[-1].startswith("Audit trail intact:")


def test_the_head_of_a_chain_idle_for_months_is_found_in_an_older_partition(quiet_workspace, past_months):
    old = append(quiet_workspace.pk, "paused", month_start(timezone.now(), -4) + timedelta(days=2))
    assert partition_of(old).endswith(f"{month_start(timezone.now(), -4):%Y%m}")

    new = append(quiet_workspace.pk, "resumed")

    assert new.prev_hash == old.hash


def history(workspace_id, months_back: int = 3) -> list[AuditEvent]:
    """Two events in each of the months ``months_back`` .. 1 before this one, then one now."""
    events = []
    for months in range(months_back, 0, -1):
        start = month_start(timezone.now(), -months)
        events += [
            append(workspace_id, "paused", start + timedelta(days=1)),
            append(workspace_id, "resumed", start + timedelta(days=2)),
        ]
    return [*events, append(workspace_id, "paused")]


def test_the_oldest_month_is_archived_and_everything_verifies(quiet_workspace, past_months, tmp_path, settings):
    settings.OPSCONSOLE_AUDIT_HEADS_TO = f"file://{tmp_path / 'heads.jsonl'}"
    events = history(quiet_workspace.pk)
    call_command("export_audit_heads", stdout=StringIO())
    names = [part.name for part in audit_partitions.partitions()]
    oldest, second = names[0], names[1]

    out = StringIO()
    call_command("archive_audit", str(tmp_path), stdout=out)

    assert f"Archived {oldest}: 0 events" in out.getvalue()  # five months back: an empty month
    call_command("archive_audit", str(tmp_path), "--partition", second, stdout=StringIO())
    call_command("archive_audit", str(tmp_path), stdout=StringIO())  # three months back: two events
    third = names[2]
    assert [part.name for part in audit_partitions.partitions()][0] == names[3]
    assert AuditEvent.objects.filter(pk__in=[e.pk for e in events[:2]]).count() == 0
    record = AuditArchive.objects.get(partition=third)
    assert record.events == 2
    assert record.chains[str(quiet_workspace.pk)]["last_hash"] == events[1].hash

    lines = (tmp_path / f"{third}.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["events"] == 2
    assert [json.loads(line)["id"] for line in lines[1:]] == [events[0].pk, events[1].pk]
    # The live chains from where the archive ends, held to heads exported before it.
    assert verify().splitlines()[-1].startswith("Audit trail intact:")
    files = [str(tmp_path / f"{name}.jsonl") for name in names[:3]]
    assert verify("--archive", *files).splitlines()[-1].startswith("Archives intact: 3 file(s)")


def test_a_changed_archive_file_does_not_verify(quiet_workspace, past_months, tmp_path):
    history(quiet_workspace.pk, months_back=5)
    call_command("archive_audit", str(tmp_path), stdout=StringIO())
    path = next(tmp_path.glob("*.jsonl"))
    record, *lines = path.read_text().splitlines()
    changed = json.loads(lines[0]) | {"message": "nothing happened"}

    path.write_text("\n".join([record, json.dumps(changed, sort_keys=True), *lines[1:]]) + "\n")

    with pytest.raises(CommandError, match=f"event {changed['id']} was changed after it was written"):
        verify("--archive", str(path))


def test_archives_out_of_order_or_with_a_gap_do_not_verify(quiet_workspace, past_months, tmp_path):
    history(quiet_workspace.pk, months_back=5)
    for _ in range(3):
        call_command("archive_audit", str(tmp_path), stdout=StringIO())
    first, _, third = sorted(str(path) for path in tmp_path.glob("*.jsonl"))

    with pytest.raises(CommandError, match="does not follow the last event of its chain in the archive before it"):
        verify("--archive", first, third)


def test_a_made_up_archive_record_does_not_hide_a_dropped_month(quiet_workspace, past_months, settings):
    """The owner drops a month by hand and writes a record for it without the key."""
    history(quiet_workspace.pk, months_back=5)
    oldest = audit_partitions.partitions()[0].name
    drop_by_hand(oldest)
    AuditArchive.objects.create(
        partition=oldest,
        ends=timezone.now(),
        events=2,
        chains={},
        file_name="x",
        file_sha256="0" * 64,
        key_id=settings.OPSCONSOLE_AUDIT_KEY_ID,
        mac="0" * 64,
        archived_at=timezone.now(),
    )

    with pytest.raises(CommandError, match=f"the archive record of {oldest} has a signature that does not match"):
        verify("--no-heads")


def test_a_month_dropped_by_hand_breaks_the_chain(quiet_workspace, past_months):
    history(quiet_workspace.pk, months_back=2)
    two_back = f"ledger_auditevent_p{month_start(timezone.now(), -2):%Y%m}"
    drop_by_hand(two_back)

    with pytest.raises(CommandError, match="does not follow the event before it"):
        verify("--no-heads")


@pytest.mark.parametrize(
    ("named", "refusal"),
    [
        ("ledger_auditevent_pnope", "is not a partition of the audit trail"),
        ("second", "comes before"),
    ],
)
def test_archiving_refuses_anything_but_the_oldest(past_months, tmp_path, named, refusal):
    names = [part.name for part in audit_partitions.partitions()]
    with pytest.raises(CommandError, match=refusal):
        call_command("archive_audit", str(tmp_path), "--partition", names[1] if named == "second" else named)
    assert not list(tmp_path.iterdir())
    assert not AuditArchive.objects.exists()


def test_a_month_that_has_not_ended_is_not_archived(db, tmp_path):
    with pytest.raises(CommandError, match="only a month that has ended is archived"):
        call_command("archive_audit", str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_an_existing_file_is_never_overwritten(past_months, tmp_path):
    oldest = audit_partitions.partitions()[0].name
    (tmp_path / f"{oldest}.jsonl").write_text("mine\n")

    with pytest.raises(CommandError, match="exists: an archive is never overwritten"):
        call_command("archive_audit", str(tmp_path))
    assert (tmp_path / f"{oldest}.jsonl").read_text() == "mine\n"
    assert audit_partitions.partitions()[0].name == oldest


def test_a_broken_month_is_not_archived(quiet_workspace, past_months, tmp_path):
    events = history(quiet_workspace.pk, months_back=5)
    tamper("UPDATE ledger_auditevent SET message = 'rewritten' WHERE id = %s", [events[1].pk])

    with pytest.raises(CommandError, match=f"event {events[1].pk} was changed after it was written"):
        call_command("archive_audit", str(tmp_path))
    assert not list(tmp_path.iterdir())
    assert AuditEvent.objects.filter(pk=events[1].pk).exists()


def test_an_archive_record_deleted_by_hand_breaks_the_chain_it_began(quiet_workspace, past_months, tmp_path):
    events = history(quiet_workspace.pk, months_back=5)
    call_command("archive_audit", str(tmp_path), stdout=StringIO())  # five months back: the first two events
    assert verify("--no-heads").splitlines()[-1].startswith("Audit trail intact:")

    tamper("DELETE FROM ledger_auditarchive", [])

    with pytest.raises(CommandError, match=f"event {events[2].pk} .* does not follow the event before it"):
        verify("--no-heads")


def head_reads_beside_a_busy(workspace, *, since: str) -> list[str]:
    """30,000 events of ``workspace`` from ``since`` (SQL) on, the trail analysed; the reads
    ledger_chain_head makes, as the database holds its text."""
    tamper(
        "INSERT INTO ledger_auditevent (actor, kind, from_state, to_state, error_category, message, created_at, "
        f"workspace_id, prev_hash, hash, hash_key) SELECT 'busy', 'note', '', '', '', '', {since} "
        "+ g * interval '1 ms', %s, '', md5(g::text), 'x' FROM generate_series(1, 30000) g",
        [workspace.pk],
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_auditevent")
        cursor.execute("SELECT pg_get_functiondef('ledger_chain_head(bigint, integer)'::regprocedure)")
        definition = cursor.fetchone()[0]
    return re.findall(r"SELECT hash, created_at INTO head (FROM .*?);", definition, re.S)


def test_a_quiet_workspaces_head_is_read_by_its_chain_index_under_a_generic_plan(quiet_workspace, workspace):
    """ledger_chain_head's reads, planned as the function plans them (generic, its parameters
    unknown), beside a busy workspace: none walks the primary key back through the busy one's
    events (it did: 4.4 s at 5,000,000 events)."""
    reads = [
        re.sub(r"\bchain_lane\b", "$2", re.sub(r"\bchain\b", "$1", read))
        for read in head_reads_beside_a_busy(workspace, since="now() - interval '1 hour'")
    ]
    assert len(reads) == 3
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for number, read in enumerate(reads):
            cursor.execute(f"PREPARE head_read(bigint, integer) AS SELECT hash, created_at {read}")
            cursor.execute("EXPLAIN (FORMAT JSON) EXECUTE head_read(%s, 0)", [quiet_workspace.pk])
            plan = json.dumps(cursor.fetchone()[0])
            cursor.execute("DEALLOCATE head_read")
            assert not re.search(r'"Index Name": "\w*_pkey"', plan), (number, read, plan)


def test_a_busy_workspaces_own_head_is_one_probe_per_month_under_a_generic_plan(workspace):
    """Its head, planned as the function plans it, read where the workspace wrote 30,000 events
    this month: along its chain index, a few rows in all. Narrowed to the recent months by their
    time (until migration 0071), the plan took the workspace's kind index, whose range holds the
    time, and read every event of the month to sort out the newest."""
    reads = [
        read
        for read in head_reads_beside_a_busy(workspace, since="date_trunc('month', now())")
        if "workspace_id >= chain" in read and "lane = 0" in read
    ]
    assert reads
    # No read narrows by the time: with `created_at >= ` the start of last month, which the kind
    # index's range holds, a generic plan on the statistics `make bench` leaves took that index.
    assert not any("created_at >=" in read for read in reads), reads
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for read in reads:
            read = re.sub(r"\bchain\b", "$1", re.sub(r"\brecent\b", "$2", read))
            cursor.execute(f"PREPARE head_read(bigint, timestamptz) AS SELECT hash, created_at {read}")
            cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE head_read(%s, date_trunc('month', now()) - interval '1 month')",
                [workspace.pk],
            )
            plan = json.dumps(cursor.fetchone()[0])
            cursor.execute("DEALLOCATE head_read")

            rows_read = sum(int(rows) for rows in re.findall(r'"Actual Rows": (\d+)', plan))
            assert rows_read < 50, plan
            assert not any("kind" in name for name in re.findall(r'"Index Name": "(\w+)"', plan)), plan
