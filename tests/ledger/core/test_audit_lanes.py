"""Audit lanes: a workspace may spread its events over several chains (``Workspace.audit_lanes``),
each with its own lock, an operation's events on the lane a stable hash of its id picks. Lane 0 is
the chain every workspace had (same lock key, same MAC bytes); every lane is verified, its heads
exported and held, and archived on its own; the lane count may change at any time."""

import json
import re
import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.utils import timezone

from ledger.core import accounts, audit_chain, audit_heads, audit_mac, audit_partitions, audit_verify, transitions
from ledger.core.audit_heads import current_heads
from ledger.engine.processing import process_due_operations
from ledger.models import AuditArchive, AuditEvent, Operation, Workspace
from tests.ledger.conftest import submit_brief
from tests.ledger.core.test_audit_chain import WRITTEN, tamper
from tests.ledger.core.test_audit_partitions import month_start, past_months, quiet_workspace  # noqa: F401


def verify(*args) -> str:
    out = StringIO()
    call_command("verify_audit", *args, stdout=out)
    return out.getvalue()


def lane_of(operation_id: int | None, lanes: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_audit_lane(%s, %s)", [operation_id, lanes])
        return cursor.fetchone()[0]


def notes(workspace_id: int, operation_ids) -> list[AuditEvent]:
    """One event per operation id (the operations need not exist: events outlive them)."""
    return audit_chain.append(
        [AuditEvent(workspace_id=workspace_id, operation_id=pk, actor="t", kind="note") for pk in operation_ids]
    )


def linked(events: list[AuditEvent]) -> bool:
    return [event.prev_hash for event in events[1:]] == [event.hash for event in events[:-1]]


@pytest.fixture
def four_lanes(workspace):
    accounts.set_audit_lanes(workspace, lanes=4, actor="test")
    return workspace


def test_lane_0_keeps_the_lock_key_and_the_mac_of_before_lanes(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_chain_lock(7, 0), ledger_chain_lock(NULL, 0), ledger_chain_lock(7, 1)")
        lane_0, global_chain, lane_1 = cursor.fetchone()
    assert lane_0 == 0x41554454 << 32 | 7  # the key of every chain before lanes
    assert global_chain == 0x41554454 << 32
    assert lane_1 not in (lane_0, global_chain)

    assert audit_mac.encoding(WRITTEN | {"lane": 0}) == audit_mac.encoding(WRITTEN)
    assert audit_mac.encoding(WRITTEN | {"lane": 2}) != audit_mac.encoding(WRITTEN)
    # A lane past 0 is not the same bytes as lane 0 with some times (the times' field is always there).
    assert audit_mac.encoding(WRITTEN | {"lane": 2}) != audit_mac.encoding(WRITTEN | {"times": 2})


def test_an_operation_s_lane_is_a_stable_hash_spread_over_the_lanes(db):
    assert lane_of(None, 4) == 0
    assert {lane_of(pk, 1) for pk in range(1, 200)} == {0}
    lanes = [lane_of(pk, 4) for pk in range(1, 401)]
    assert lanes == [lane_of(pk, 4) for pk in range(1, 401)]
    assert all(60 <= lanes.count(lane) <= 140 for lane in range(4)), [lanes.count(lane) for lane in range(4)]
    # Ids with a stride (a batch interleaved with another workspace's) spread too, unlike id % 4.
    assert len({lane_of(pk, 4) for pk in range(4, 400, 4)}) == 4


def test_a_four_lane_workspace_spreads_its_operations_and_each_lane_verifies(four_lanes):
    for n in range(24):
        submit_brief(four_lanes, request_id=f"R-{n}")
    process_due_operations(worker="w1")

    events = list(AuditEvent.objects.filter(workspace=four_lanes).order_by("id"))
    by_operation: dict[int, set[int]] = {}
    for event in events:
        if event.operation_id:
            by_operation.setdefault(event.operation_id, set()).add(event.lane)
    assert all(lanes == {lane_of(pk, 4)} for pk, lanes in by_operation.items())  # intake, claim, success alike
    assert {event.lane for event in events if event.operation_id is None} == {0}  # created, lanes changed
    assert {event.lane for event in events} == {0, 1, 2, 3}
    for lane in range(4):
        chain = [event for event in events if event.lane == lane]
        assert chain[0].prev_hash == ""
        assert linked(chain), lane

    output = verify("--no-heads")
    for lane in (1, 2, 3):
        assert f"workspace demo lane {lane}: " in output
    assert output.splitlines()[-1].startswith("Audit trail intact:")


def test_a_later_lane_is_read_by_its_own_index(four_lanes):
    """The head read, the next lane's probe and verification's chunks of a lane past 0 can each be
    answered by audit_lane_idx (its condition, lane <> 0, follows from theirs), as a generic plan."""
    notes(four_lanes.pk, range(1, 41))
    reads = {
        # ledger_chain_head's, for a lane past 0 (core/sql/chain_head.sql)
        "head": "SELECT hash, created_at FROM ledger_auditevent WHERE workspace_id >= $1 AND workspace_id <= $1 "
        "AND lane >= $2 AND lane <= $2 AND lane <> 0 AND hash <> '' "
        "ORDER BY workspace_id DESC, lane DESC, id DESC LIMIT 1",
        "next lane": audit_heads._NEXT_LANE.format(workspace="workspace_id = $1").replace("%s", "$2"),
        "chunk": audit_verify._CHUNK.replace(
            "{chain}", f"{audit_verify._WORKSPACE[False]} AND {audit_verify._LANE[False]}"
        )
        .replace("{table}", "ledger_auditevent")
        .replace("%(chain)s", "$1")
        .replace("%(lane)s", "$2")
        .replace("%(after)s", "0")
        .replace("%(chunk)s", "10"),
    }
    with transaction.atomic(), connection.cursor() as cursor:
        # The plans name the partitions' indexes: those of audit_lane_idx are its partitions.
        cursor.execute("SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'audit_lane_idx'::regclass")
        lane_indexes = {name for (name,) in cursor.fetchall()}
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("SET LOCAL enable_seqscan = off")  # whether the index can answer, not what is cheapest
        for name, sql in reads.items():
            cursor.execute(f"PREPARE lane_read(bigint, integer) AS {sql}")
            cursor.execute("EXPLAIN (FORMAT JSON) EXECUTE lane_read(%s, 2)", [four_lanes.pk])
            used = set(re.findall(r'"Index Name": "(\w+)"', json.dumps(cursor.fetchone()[0])))
            cursor.execute("DEALLOCATE lane_read")
            assert used, name
            assert used <= lane_indexes, (name, used)


def test_a_tampered_event_in_lane_2_is_found(four_lanes):
    notes(four_lanes.pk, range(1, 41))
    target = AuditEvent.objects.filter(workspace=four_lanes, lane=2).order_by("id")[3]

    tamper("UPDATE ledger_auditevent SET actor = 'someone-else' WHERE id = %s", [target.pk])

    with pytest.raises(CommandError, match=f"event {target.pk} .* was changed after it was written"):
        verify("--no-heads")


def test_an_event_moved_to_another_lane_is_found(four_lanes):
    notes(four_lanes.pk, range(1, 41))
    target = AuditEvent.objects.filter(workspace=four_lanes, lane=2).order_by("-id").first()

    tamper("UPDATE ledger_auditevent SET lane = 3 WHERE id = %s", [target.pk])

    with pytest.raises(CommandError, match=f"event {target.pk} .* does not follow the event before it"):
        verify("--no-heads")


def test_a_whole_lane_relabelled_is_found_by_its_macs(four_lanes):
    """Its links still hold, as a lane of its own: only the MAC, which covers the lane, shows it."""
    notes(four_lanes.pk, range(1, 41))
    first = AuditEvent.objects.filter(workspace=four_lanes, lane=3).order_by("id").first()

    tamper("UPDATE ledger_auditevent SET lane = 7 WHERE workspace_id = %s AND lane = 3", [four_lanes.pk])

    with pytest.raises(CommandError, match=f"event {first.pk} .* was changed after it was written"):
        verify("--no-heads")


def test_an_event_made_up_on_a_lane_no_append_makes_is_verified_too(workspace, settings):
    """The global chain has one lane; an owner's event slipped in at lane 3 of it is still walked."""
    [event] = audit_chain.append([AuditEvent(workspace_id=None, actor="t", kind="note")])
    made_up = event.pk + 1000
    tamper(
        "INSERT INTO ledger_auditevent (id, actor, kind, from_state, to_state, error_category, message, created_at, "
        "prev_hash, hash, hash_key, lane) VALUES (%s, 'x', 'note', '', '', '', '', now(), '', %s, %s, 3)",
        [made_up, "ab" * 32, settings.OPSCONSOLE_AUDIT_KEY_ID],
    )

    with pytest.raises(CommandError, match=f"event {made_up} .* was changed after it was written"):
        verify("--no-heads")


def test_every_lane_s_head_is_exported_and_held(four_lanes, tmp_path, settings):
    path = tmp_path / "heads.jsonl"
    settings.OPSCONSOLE_AUDIT_HEADS_TO = f"file://{path}"
    notes(four_lanes.pk, range(1, 41))
    call_command("export_audit_heads", stdout=StringIO())

    [line] = [json.loads(text) for text in path.read_text().splitlines()]
    exported = {head.get("lane", 0): head for head in line["heads"] if head["workspace_id"] == four_lanes.pk}
    assert sorted(exported) == [0, 1, 2, 3]
    assert "lane" not in exported[0]  # lane 0's head as every head was written before lanes
    for lane, head in exported.items():
        assert head["event_id"] == AuditEvent.objects.filter(workspace=four_lanes, lane=lane).latest("id").pk
    assert verify().splitlines()[-1].startswith("Audit trail intact:")

    newest = AuditEvent.objects.get(pk=exported[2]["event_id"])
    tamper("DELETE FROM ledger_auditevent WHERE id = %s", [newest.pk])

    assert verify("--no-heads").splitlines()[-1].startswith("Audit trail intact:")  # what is left links up
    with pytest.raises(
        CommandError, match=f"exported head of workspace demo lane 2, event {newest.pk}, is no longer on its chain"
    ):
        verify()


def test_changing_the_lane_count_keeps_every_lane_verifying(four_lanes, tmp_path, settings):
    settings.OPSCONSOLE_AUDIT_HEADS_TO = f"file://{tmp_path / 'heads.jsonl'}"
    notes(four_lanes.pk, range(1, 21))
    call_command("audit_lanes", four_lanes.slug, "1", stdout=StringIO())
    call_command("export_audit_heads", stdout=StringIO())

    later = notes(four_lanes.pk, range(1, 21))  # the same operations: all on lane 0 now
    assert {event.lane for event in later} == {0}
    changed = AuditEvent.objects.get(workspace=four_lanes, kind="audit_lanes_changed", message="audit lanes 4 -> 1")
    assert changed.actor == "cli"
    # The lanes no longer used keep their events and their heads.
    assert {head.get("lane", 0) for head in current_heads() if head["workspace_id"] == four_lanes.pk} == {0, 1, 2, 3}
    assert verify().splitlines()[-1].startswith("Audit trail intact:")

    accounts.set_audit_lanes(four_lanes, lanes=3, actor="test")
    notes(four_lanes.pk, range(1, 21))
    assert verify().splitlines()[-1].startswith("Audit trail intact:")


def test_a_lane_count_out_of_range_is_refused(workspace):
    for lanes in (0, 65):
        with pytest.raises(accounts.BadAuditLanes, match="1 to 64 audit lanes"):
            accounts.set_audit_lanes(workspace, lanes=lanes, actor="test")
        with pytest.raises(CommandError, match="1 to 64 audit lanes"):
            call_command("audit_lanes", workspace.slug, str(lanes), stdout=StringIO())
    workspace.refresh_from_db()
    assert workspace.audit_lanes == 1
    assert not AuditEvent.objects.filter(kind="audit_lanes_changed").exists()
    out = StringIO()
    call_command("audit_lanes", workspace.slug, stdout=out)
    assert out.getvalue() == "demo: 1 audit lane(s).\n"


def test_a_month_with_lanes_is_archived_chain_by_chain(quiet_workspace, past_months, tmp_path):  # noqa: F811
    # Set without its event, so that every lane's chain starts in the oldest month (times never go back).
    Workspace.objects.filter(pk=quiet_workspace.pk).update(audit_lanes=4)
    start = month_start(timezone.now(), -5)
    old = audit_chain.append(
        [
            AuditEvent(workspace_id=quiet_workspace.pk, operation_id=pk, actor="t", kind="note", created_at=start)
            for pk in range(1, 21)
        ]
    )
    notes(quiet_workspace.pk, range(1, 21))
    oldest = audit_partitions.partitions()[0].name

    call_command("archive_audit", str(tmp_path), stdout=StringIO())

    record = AuditArchive.objects.get(partition=oldest)
    newest = {event.lane: event for event in old}  # each lane's last event of the month
    assert set(record.chains) == {str(quiet_workspace.pk)} | {f"{quiet_workspace.pk}:{lane}" for lane in (1, 2, 3)}
    for lane, event in newest.items():
        key = audit_chain_key(quiet_workspace.pk, lane)
        assert record.chains[key]["last_hash"] == event.hash
    assert verify("--no-heads").splitlines()[-1].startswith("Audit trail intact:")
    assert verify("--archive", str(tmp_path / f"{oldest}.jsonl")).splitlines()[-1].startswith("Archives intact")


def audit_chain_key(workspace_id: int, lane: int) -> str:
    return f"{workspace_id}:{lane}" if lane else str(workspace_id)


@pytest.mark.django_db(transaction=True)
def test_many_appenders_on_a_four_lane_workspace_leave_every_lane_linked(workspace):
    """Threads with connections of their own append at once, each a transaction over several
    operations (so several lanes, taken in order): no deadlock, no fork, every lane linked."""
    accounts.set_audit_lanes(workspace, lanes=4, actor="test")
    writers, rounds = 12, 5
    barrier = threading.Barrier(writers, timeout=30)
    failures = []

    def write(n):
        try:
            barrier.wait()
            for round_ in range(rounds):
                # Operation ids in a different order in each writer: their lanes are taken sorted anyway.
                ids = [(n * 7 + round_ * 3 + k) % 40 + 1 for k in range(3)]
                notes(workspace.pk, ids if n % 2 else ids[::-1])
                transitions.record_audit_event(actor=f"writer-{n}", kind="note", workspace=workspace)
        except BaseException as error:  # asserted below: a thread's exception alone fails no test
            failures.append(error)
            raise
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    events = list(AuditEvent.objects.filter(workspace=workspace).order_by("id"))
    assert len([event for event in events if event.kind == "note"]) == writers * rounds * 4
    assert {event.lane for event in events} == {0, 1, 2, 3}
    for lane in range(4):
        assert linked([event for event in events if event.lane == lane]), lane
    assert verify("--no-heads").splitlines()[-1].startswith("Audit trail intact:")


@pytest.mark.django_db(transaction=True)
def test_intake_claims_and_workers_on_a_four_lane_workspace_leave_every_lane_linked(workspace):
    """Intake (each request a transaction of its own) and a worker finishing what it claims, at once."""
    accounts.set_audit_lanes(workspace, lanes=4, actor="test")
    failures = []

    def submit(n):
        try:
            for k in range(8):
                submit_brief(workspace, request_id=f"R-{n}-{k}")
        except BaseException as error:
            failures.append(error)
            raise
        finally:
            connection.close()

    def work():
        try:
            for _ in range(6):
                process_due_operations(worker="w1")
        except BaseException as error:
            failures.append(error)
            raise
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(4)] + [threading.Thread(target=work)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    process_due_operations(worker="w1")

    assert failures == []
    assert Operation.objects.filter(workspace=workspace).count() == 32
    events = list(AuditEvent.objects.filter(workspace=workspace).order_by("id"))
    for lane in range(4):
        assert linked([event for event in events if event.lane == lane]), lane
    assert verify("--no-heads").splitlines()[-1].startswith("Audit trail intact:")
