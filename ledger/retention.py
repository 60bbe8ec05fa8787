"""Retention: what the ledger forgets, and when (docs/retention.md).

Each action's policy (``ledger.core.policies``) has two windows, counted from when an operation
finished (its last change, in a terminal state):
- after the **payload window** its payload and result are redacted to a tombstone: the identity
  fields (those that are not sensitive) and the references (``*_id`` entries of the result), with
  the key, the fingerprint, the state, the external id and the times; its conflicts' payloads go
  too. Duplicates and conflicts are still recognised, by key and fingerprint;
- after the **key window** the tombstone is deleted, with its deliveries, attempts, conflicts,
  approvals and contributions. Its audit events stay (the chains are append-only; an event then
  names an operation id that no longer exists), and so does a review draft it made (the
  destination's record, no longer linked). Intake refuses an arrival older than the key window as
  ``stale``, so nothing deleted here can be acted on twice by a late redelivery; to keep that
  true, a tombstone is kept while one of its deliveries says it occurred within the key window.

Unfinished operations are never touched (nor finished ones with an open conflict, which waits for a
person). ``purge`` works in chunks, each its own transaction, so it can be stopped at any point and
run again: what is left is what it finds next time.

Deliveries and attempts are partitioned by ranges of operations (``ledger.core.operation_partitions``):
where every operation of a range is deleted after its key window, the range's partitions are
dropped whole (no row deleted, no dead tuple) before its operations are deleted; the rest is
deleted row by row.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError, IntegrityError, connection, models, transaction
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.utils import timezone

from ledger import timed
from ledger.actions import ActionDefinition, registry
from ledger.core import operation_partitions, policies
from ledger.core.bulk_sql import update_each
from ledger.core.privacy import REDACTED
from ledger.core.transitions import record_audit_event
from ledger.models import (
    Approval,
    Attempt,
    Conflict,
    Contribution,
    Delivery,
    Heartbeat,
    HookRefusal,
    Operation,
    Workspace,
)
from ledger.reads import dashboard
from ledger.states import TERMINAL_STATES

logger = logging.getLogger("ledger")

CHUNK = 1000


@dataclass
class WorkspacePurge:
    redacted: int = 0  # operations whose payload became a tombstone
    deleted: int = 0  # tombstones deleted after the key window
    kept_for_occurred_at: int = 0  # past the key window, kept: a delivery says it occurred within it
    refused_deliveries: int = 0  # invalid and stale deliveries (no operation) past the key window
    hook_refusal_hours: int = 0  # a source's counted refusals of an hour past the default key window
    skipped_chunks: int = 0  # chunks that met a concurrent write; the next run takes them

    @property
    def changed(self) -> bool:
        return bool(self.redacted or self.deleted or self.refused_deliveries or self.hook_refusal_hours)

    def summary(self) -> str:
        return (
            f"redacted {self.redacted} payloads, deleted {self.deleted} tombstones, "
            f"deleted {self.refused_deliveries} refused deliveries"
            + (
                f", kept {self.kept_for_occurred_at} whose deliveries occurred within the key window"
                if self.kept_for_occurred_at
                else ""
            )
            + (f", forgot {self.hook_refusal_hours} hours of counted hook refusals" if self.hook_refusal_hours else "")
            + (f", {self.skipped_chunks} chunks left for the next run" if self.skipped_chunks else "")
        )


@dataclass
class PurgeReport:
    as_of: datetime
    dry_run: bool
    workspaces: dict[str, WorkspacePurge] = field(default_factory=dict)
    samples_forgotten: int = 0  # the dashboard's samples older than dashboard.KEEP, deleted
    ranges_dropped: list[str] = field(default_factory=list)  # partitions of deliveries and attempts dropped (would be)
    ranges_skipped: int = 0  # ranges whose drop the database refused (a lock, a conflict); their rows went one by one

    def total(self, name: str) -> int:
        return sum(getattr(counts, name) for counts in self.workspaces.values())


def purge(
    *,
    as_of: datetime | None = None,
    dry_run: bool = False,
    chunk: int = CHUNK,
    progress: Callable[[str], None] | None = None,
    actor: str = "purge",
    vacuum: bool = True,
) -> PurgeReport:
    """Apply every workspace's retention windows as of ``as_of`` (now): redact, then delete.

    ``dry_run`` counts what would change and changes nothing. ``progress`` hears a line per chunk.
    Each workspace that changed gets an audit event with its counts; the run leaves a heartbeat.
    The tables are vacuumed after a run that deleted or redacted rows (outside any
    transaction), since a purge is the one writer that leaves many dead rows at once.
    """
    as_of = as_of or timezone.now()
    report = PurgeReport(as_of=as_of, dry_run=dry_run)
    say = progress or (lambda line: None)
    workspaces = {
        workspace: {name: policies.policy_for(workspace.pk, name) for name in registry}
        for workspace in Workspace.objects.order_by("slug")
    }
    for workspace, windows in workspaces.items():
        counts = report.workspaces[workspace.slug] = WorkspacePurge()
        _redact_payloads(workspace, windows, as_of, counts, dry_run=dry_run, chunk=chunk, say=say)
    _drop_ranges(workspaces, as_of, report, dry_run=dry_run, chunk=chunk, say=say)
    for workspace, windows in workspaces.items():
        counts = report.workspaces[workspace.slug]
        _delete_tombstones(workspace, windows, as_of, counts, dry_run=dry_run, chunk=chunk, say=say)
        _delete_refused_deliveries(workspace, windows, as_of, counts, dry_run=dry_run, chunk=chunk)
        _forget_hook_refusals(workspace, as_of, counts, dry_run=dry_run)
        verb = "would change" if dry_run else "changed"
        say(f"{workspace.slug}: {verb}: {counts.summary()}")
        if counts.changed and not dry_run:
            # Lock order (docs/architecture.md): each chunk commits its rows on its own, and the workspace's
            # event comes after them, alone (a caller's transaction would hold the chain across chunks).
            record_audit_event(
                actor=actor,
                kind="purged",
                workspace=workspace,
                message=f"as of {{as_of}}: {counts.summary()}",
                times=timed.kept(as_of=as_of),
            )
    if not dry_run:
        report.samples_forgotten = dashboard.forget_samples(before=as_of - dashboard.KEEP)
        Heartbeat.objects.update_or_create(
            name="purge",
            defaults={
                "beat_at": timezone.now(),
                "detail": {
                    name: report.total(name) for name in ("redacted", "deleted", "refused_deliveries", "skipped_chunks")
                },
            },
        )
        if (
            vacuum
            and not connection.in_atomic_block
            and (
                report.total("redacted")
                or report.total("deleted")
                or report.total("refused_deliveries")
                or report.samples_forgotten
            )
        ):
            with connection.cursor() as cursor:
                cursor.execute(f"VACUUM (ANALYZE) {', '.join(written_tables())}")
    return report


def _cutoff(windows: dict, as_of: datetime, window: str):
    """Per row, the time before which an operation of its action is past ``window``: a CASE over
    the actions (an action no longer registered gets the definitions' defaults)."""
    default = as_of - getattr(ActionDefinition, window)
    return Case(
        *[When(action=name, then=Value(as_of - getattr(policy, window))) for name, policy in windows.items()],
        default=Value(default),
    )


def _finished(workspace) -> Q:
    open_conflict = Conflict.objects.filter(operation=OuterRef("pk"), status=Conflict.Status.OPEN)
    return Q(workspace=workspace, state__in=TERMINAL_STATES) & ~Q(Exists(open_conflict))


def _chunks(queryset, chunk: int, fields: tuple[str, ...]):
    """The rows of ``queryset`` in chunks along the primary key, read one chunk at a time (each
    chunk may be changed before the next is read)."""
    last = 0
    while True:
        rows = list(queryset.filter(pk__gt=last).order_by("pk").values("pk", *fields)[:chunk])
        if not rows:
            return
        last = rows[-1]["pk"]
        yield rows


# --- the payload window ---------------------------------------------------------------------------


def _redact_payloads(workspace, windows, as_of, counts: WorkspacePurge, *, dry_run, chunk, say) -> None:
    due = Operation.objects.filter(
        _finished(workspace), redacted_at__isnull=True, updated_at__lt=_cutoff(windows, as_of, "payload_retention")
    )
    if dry_run:
        counts.redacted = due.count()
        return
    for rows in _chunks(due, chunk, ("action", "payload", "result")):
        with transaction.atomic():
            # One UPDATE .. FROM (VALUES ..) for the chunk, leaving updated_at alone: the key
            # window counts from when the operation finished.
            update_each(
                Operation,
                [row["pk"] for row in rows],
                match={},
                where={},
                each={
                    "payload": [tombstone(row["action"], row["payload"]) for row in rows],
                    "result": [_references(row["action"], row["result"]) for row in rows],
                },
                same={"redacted_at": timezone.now()},
            )
            _redact_conflicts([row["pk"] for row in rows], {row["pk"]: row["action"] for row in rows})
        counts.redacted += len(rows)
        say(f"{workspace.slug}: redacted {counts.redacted} payloads")


def tombstone(action_name: str, payload: dict) -> dict:
    """What a redacted payload keeps: its identity fields that are not sensitive (they are in the
    key anyway), nothing else."""
    action = registry.get(action_name)
    if action is None or not isinstance(payload, dict):
        return {}
    return {
        name: payload[name]
        for name in action.identity_fields
        if name in payload and name not in action.sensitive_fields
    }


def _references(action_name: str, result) -> dict | None:
    """What a redacted result keeps: the ids of records elsewhere (``record_id``, ``draft_id``),
    never a sensitive field a destination echoed back (say ``customer_id``)."""
    if not isinstance(result, dict):
        return None
    action = registry.get(action_name)
    sensitive = set(action.sensitive_fields) if action is not None else set(result)
    return {
        name: value
        for name, value in result.items()
        if (name == "id" or name.endswith("_id")) and name not in sensitive
    } or None


def _redact_conflicts(operation_ids: list[int], actions: dict[int, str]) -> None:
    conflicts = list(
        Conflict.objects.filter(operation_id__in=operation_ids).values(
            "pk", "operation_id", "incoming_payload", "differences"
        )
    )
    update_each(
        Conflict,
        [conflict["pk"] for conflict in conflicts],
        match={},
        where={},
        same={},
        each={
            "incoming_payload": [tombstone(actions[c["operation_id"]], c["incoming_payload"]) for c in conflicts],
            "differences": [
                [{"field": d.get("field"), "recorded": REDACTED, "incoming": REDACTED} for d in c["differences"] or []]
                for c in conflicts
            ],
        },
    )


# --- the key window -------------------------------------------------------------------------------


def _past_key_window(workspace, windows, as_of):
    """The operations of ``workspace`` past their key window: finished (no open conflict) before
    it began. Those of them a delivery says occurred within it are kept (``_kept``)."""
    return Operation.objects.annotate(key_cutoff=_cutoff(windows, as_of, "key_retention")).filter(
        _finished(workspace), updated_at__lt=F("key_cutoff")
    )


def _kept() -> Exists:
    """A delivery of the operation says it occurred within the key window: a sender whose clock ran
    ahead could otherwise redeliver, once the key is gone, as new work."""
    return Exists(Delivery.objects.filter(operation=OuterRef("pk"), occurred_at__gte=OuterRef("key_cutoff")))


def _deletable(workspace, windows, as_of):
    """The operations of ``workspace`` that retention deletes now."""
    return _past_key_window(workspace, windows, as_of).exclude(_kept())


def _delete_tombstones(workspace, windows, as_of, counts: WorkspacePurge, *, dry_run, chunk, say) -> None:
    counts.kept_for_occurred_at = _past_key_window(workspace, windows, as_of).filter(_kept()).count()
    deletable = _deletable(workspace, windows, as_of)
    if dry_run:
        counts.deleted += deletable.count()
        return
    for rows in _chunks(deletable, chunk, ()):
        ids = [row["pk"] for row in rows]
        try:
            with transaction.atomic():
                _delete_operations(ids)
        except IntegrityError:
            # A delivery of one of them arrived while this chunk was being deleted (a duplicate
            # that referred to it): nothing of the chunk is deleted; the next run tries again.
            logger.warning(
                "purge: a chunk met a concurrent write and is left for the next run",
                extra={"workspace": workspace.slug, "operations": len(ids)},
            )
            counts.skipped_chunks += 1
            continue
        counts.deleted += len(ids)
        say(f"{workspace.slug}: deleted {counts.deleted} tombstones")


# --- ranges of operations, dropped whole --------------------------------------------------------


def _drop_ranges(workspaces: dict, as_of, report: PurgeReport, *, dry_run, chunk, say) -> None:
    """Drop the deliveries' and attempts' partitions of each range of operations all of which
    retention deletes now, then delete those operations (and the rest they own) by rows.

    A range is looked at once it is full (its last id made) and its newest operation arrived
    before the shortest key window of any policy began: before that, one of its operations is
    surely kept, and the look reads the whole range.
    """
    shortest = min(
        [ActionDefinition.key_retention]
        + [policy.key_retention for windows in workspaces.values() for policy in windows.values()]
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value FROM ledger_operation_id_seq")
        made = cursor.fetchone()[0]
    for found in operation_partitions.ranges():
        in_range = Operation.objects.filter(pk__gte=found.first, pk__lt=found.end)
        newest = in_range.order_by("-pk").values_list("created_at", flat=True).first()
        if found.end - 1 > made or (newest is not None and newest >= as_of - shortest):
            break
        if any(_keeps_one(in_range, workspace, windows, as_of) for workspace, windows in workspaces.items()):
            continue
        name = f"operations {found.first}-{found.end - 1}"
        if dry_run:
            report.ranges_dropped.append(name)
            continue
        _drop_range(found, in_range, report, workspaces, name=name, chunk=chunk, say=say)


def _keeps_one(in_range, workspace, windows, as_of) -> bool:
    """Whether retention keeps one of ``workspace``'s operations in ``in_range``."""
    deletable = _deletable(workspace, windows, as_of).values("pk")
    return in_range.filter(workspace=workspace).exclude(pk__in=deletable).exists()


def _drop_range(found, in_range, report: PurgeReport, workspaces: dict, *, name: str, chunk: int, say) -> None:
    slugs = {workspace.pk: workspace.slug for workspace in workspaces}
    # A conflict names its delivery (a foreign key): gone before the deliveries' partition.
    for rows in _chunks(Conflict.objects.filter(operation__in=in_range), chunk, ()):
        _raw_delete(Conflict.objects.filter(pk__in=[row["pk"] for row in rows]))
    try:
        with transaction.atomic():
            operation_partitions.drop_range(found.first)
    except DatabaseError as error:
        # Held by a long reader, or a conflict or an unfinished operation arrived since the look:
        # the rows of the range go one by one after this (what retention deletes of them).
        logger.warning("purge: the partitions of %s stay: %s", name, error)
        report.ranges_skipped += 1
        return
    report.ranges_dropped.append(name)
    say(f"dropped the deliveries and attempts of {name}")
    for rows in _chunks(in_range, chunk, ("workspace_id",)):
        with transaction.atomic():
            _delete_operations([row["pk"] for row in rows])
        for row in rows:
            report.workspaces[slugs[row["workspace_id"]]].deleted += 1


# The rows that belong to an operation and go with it, in an order that deletes each row before
# the rows it refers to (a conflict refers to its delivery).
OWNED = (Contribution, Approval, Conflict, Delivery, Attempt)


def _delete_operations(ids: list[int]) -> None:
    """Delete the operations and every row that refers to them, children first. Raw deletes (no
    collector, which would load every row): the rows that refer to these are deleted (``OWNED``)
    or detached (relations declared ``SET_NULL``: a destination's records) here; audit events
    refer to them without a constraint (``DO_NOTHING``)."""
    if not ids:
        return
    for relation in referring_relations():
        if relation.on_delete is models.SET_NULL:
            relation.related_model.objects.filter(**{f"{relation.field.name}__in": ids}).update(
                **{relation.field.name: None}
            )
    for model in OWNED:
        _raw_delete(model.objects.filter(operation_id__in=ids))
    _raw_delete(Operation.objects.filter(pk__in=ids))


def written_tables() -> list[str]:
    """Every table a purge writes: the operations, the rows they own, the rows it detaches, and the
    dashboard's samples it forgets, the hooks' counted refusals."""
    detached = [relation.related_model for relation in referring_relations() if relation.on_delete is models.SET_NULL]
    forgotten = [*dashboard.SAMPLES, HookRefusal]
    return [model._meta.db_table for model in dict.fromkeys([Operation, *OWNED, *detached, *forgotten])]


def referring_relations():
    """Every relation to Operation from another table, hidden ones (``related_name="+"``) too."""
    return [
        field
        for field in Operation._meta.get_fields(include_hidden=True)
        if field.auto_created and not field.concrete and field.related_model is not Operation
    ]


def _raw_delete(queryset) -> int:
    return queryset._raw_delete(queryset.db)


def _delete_refused_deliveries(workspace, windows, as_of, counts: WorkspacePurge, *, dry_run, chunk) -> None:
    """Invalid and stale deliveries (no operation) past their action's key window (the default one
    when they name no known action): they keep errors and labels, never content, but not forever."""
    due = Delivery.objects.filter(
        workspace=workspace, operation__isnull=True, received_at__lt=_cutoff(windows, as_of, "key_retention")
    )
    if dry_run:
        counts.refused_deliveries = due.count()
        return
    for rows in _chunks(due, chunk, ()):
        _raw_delete(Delivery.objects.filter(pk__in=[row["pk"] for row in rows]))
        counts.refused_deliveries += len(rows)


def _forget_hook_refusals(workspace, as_of, counts: WorkspacePurge, *, dry_run) -> None:
    """The counts of a workspace's hook refusals (``ledger.intake.refusals``) of hours past the
    default key window: one row per source, address, reason and hour, deleted in one statement."""
    due = HookRefusal.objects.filter(source__workspace=workspace, hour__lt=as_of - ActionDefinition.key_retention)
    counts.hook_refusal_hours = due.count() if dry_run else _raw_delete(due)
