"""The reconciliation audit: the ledger and each destination compared both ways over a window.

For each external action that can list its destination's records (``list_records``):

- ``missing_at_destination``: a ``succeeded`` operation no record carries (not in the listing,
  and its own lookup confirms it absent: a record created before the window, e.g. one
  reconciliation found later, is still found);
- ``unknown_to_ledger``: a record created in the window that carries a reference shaped like one
  of our keys (``workspace:…:action``) without a ``succeeded`` operation of that key, or a second
  record of a succeeded one; an operation still ``processing`` or ``unknown`` is left alone, since
  its outcome is on its way or reconciliation is already asking about it;
- ``content_differs``: the record of a succeeded operation holds other content than the
  operation's ``record_payload`` (the evidence names the fields, never their values);
- ``destination_reset``: the destination's listing lacks (nearly) every record the ledger says
  succeeded there in the window for a workspace: at least ``RESET_MIN_OPERATIONS`` succeeded
  operations of the workspace, of which at least ``RESET_SHARE`` are in no listed record (a
  stand-in restarted empty, a sandbox wiped); judged per workspace, so one tenant's reset never
  hides another's few lost records. One finding per such workspace, with the numbers, instead of one
  ``missing_at_destination`` each (and no lookup each: a reset answers them all "absent"). Below
  the threshold a loss is a few records, each worth its own finding and its own lookup.

The window is [since, until): ``until`` is now less the longest ``settle_after`` (a request still
landing is not judged), ``since`` the previous successful run's ``until`` (24 hours before
``until`` the first time) unless given. Destinations are asked outside any transaction; the
findings are written together at the end, so a run that fails (a destination down) leaves its
ReconciliationRun marked failed with the error and no mismatch at all. A finding already open
from an earlier run is counted but not recorded again (``mismatch_open_once``).
"""

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import unquote

from django.db import transaction
from django.utils import timezone

from ledger.actions import ActionDefinition, registry
from ledger.core import privacy
from ledger.core.transitions import audit_event, record_audit_events
from ledger.models import Operation, Workspace
from ledger.outcomes import Absent, CannotTell, OutcomeError
from ledger.states import State
from reconciliation.models import Mismatch, ReconciliationRun, reset_summary

ACTOR = "reconciliation-audit"
FIRST_WINDOW = timedelta(hours=24)
# An operation in one of these states has an outcome on its way (or being reconciled): a record
# that carries its key is not news.
SETTLING = (State.PROCESSING, State.UNKNOWN)
# What a destination can answer instead of records: the run fails, and says why.
DESTINATION_ERRORS = (OutcomeError, KeyError, ValueError, TypeError)
_CHUNK = 500
# A destination_reset: this many succeeded operations in the window at least (fewer are read one
# by one), and this share of them at least in no listed record (a partial loss is per record).
RESET_MIN_OPERATIONS = 20
RESET_SHARE = 0.9


class AuditError(Exception):
    """The audit cannot run as asked (an empty window); the message says why."""


class DestinationUnclear(Exception):
    """A destination could not tell whether it holds a succeeded operation's record."""


@dataclass
class Finding:
    workspace_id: int
    action: str
    kind: str
    reference: str
    record_id: str = ""
    operation: Operation | None = None
    destination: str = ""
    evidence: dict = field(default_factory=dict)

    @property
    def identity(self) -> tuple:
        return self.workspace_id, self.action, self.kind, self.reference, self.record_id


@dataclass
class ActionAudit:
    findings: list[Finding] = field(default_factory=list)
    records_seen: int = 0
    operations_checked: int = 0


def auditable_actions() -> list[ActionDefinition]:
    """External actions whose destination can list the records it created in a window."""
    return [action for _, action in sorted(registry.items()) if action.external and action.lists_records]


def audit_window(
    *, since: datetime | None, now: datetime, actions: list[ActionDefinition]
) -> tuple[datetime, datetime]:
    margin = max((action.settle_after for action in actions), default=timedelta(0))
    until = now - margin
    if since is None:
        previous = (
            ReconciliationRun.objects.filter(status=ReconciliationRun.Status.SUCCEEDED)
            .order_by("-until")
            .values_list("until", flat=True)
            .first()
        )
        since = previous or until - FIRST_WINDOW
    if since >= until:
        raise AuditError(
            f"Nothing to audit: the window starts at {since:%Y-%m-%d %H:%M:%S} UTC, not before its end "
            f"{until:%Y-%m-%d %H:%M:%S} UTC (now less {margin.total_seconds():g} s of settle time)."
        )
    return since, until


def run_audit(*, since: datetime | None = None) -> ReconciliationRun:
    """Audit every auditable action over the window and record the run and its new mismatches.

    Returns the run (``succeeded`` or ``failed``, with the error). Raises ``AuditError`` before
    anything is recorded when the window is empty. Destinations are asked outside any
    transaction; the mismatches, their audit events and the run's counts commit together.
    """
    actions = auditable_actions()
    started = timezone.now()
    since, until = audit_window(since=since, now=started, actions=actions)
    run = ReconciliationRun.objects.create(started_at=started, since=since, until=until)
    try:
        audits = [audit_destination(group, since=since, until=until) for group in _by_destination(actions)]
    except Exception as exc:
        # Recorded whatever it was, so no run stays "running"; only a destination's failure is
        # an expected outcome, anything else is a bug and goes on up.
        # A destination's refusal quotes its words, which may quote its credential: masked first.
        error = privacy.secrets_masked(f"{type(exc).__name__}: {exc}", actions)
        _finish(run, status=ReconciliationRun.Status.FAILED, error=error)
        if isinstance(exc, DESTINATION_ERRORS + (DestinationUnclear,)):
            return run
        raise
    findings = [finding for audit in audits for finding in audit.findings]
    with transaction.atomic():
        new = _record(run, findings)
        for kind in Mismatch.Kind.values:
            setattr(run, kind, sum(1 for finding in findings if finding.kind == kind))
        run.records_seen = sum(audit.records_seen for audit in audits)
        run.operations_checked = sum(audit.operations_checked for audit in audits)
        run.new_mismatches = new
        _finish(run, status=ReconciliationRun.Status.SUCCEEDED)
    return run


def _by_destination(actions: list[ActionDefinition]) -> list[list[ActionDefinition]]:
    groups: dict[str, list[ActionDefinition]] = {}
    for action in actions:
        groups.setdefault(action.destination_name(), []).append(action)
    return list(groups.values())


def audit_destination(actions: list[ActionDefinition], *, since: datetime, until: datetime) -> ActionAudit:
    """Compare the actions of one destination with its records, listed once for them all.

    Records are listed from the longest ``settle_after`` before ``since``, so a record whose
    operation succeeded just inside the window is seen; only records created inside it are judged.
    A listing that lacks nearly all the window's succeeded operations is one ``destination_reset``.
    """
    records = list(actions[0].list_records(since - max(a.settle_after for a in actions), until))
    audit = ActionAudit(records_seen=len(records))
    succeeded = {action.name: _succeeded(action, since=since, until=until) for action in actions}
    listed = {action.our_reference(record) for action in actions for record in records}
    unlisted = [op for operations in succeeded.values() for op in operations if op.key not in listed]
    reset = _reset_workspaces(succeeded, unlisted)
    for action in actions:
        audit_action(action, records, succeeded[action.name], since=since, until=until, into=audit, reset=reset)
    if reset:
        lost = [op for op in unlisted if op.workspace_id in reset]
        audit.findings += _reset_findings(actions, lost, succeeded, records_listed=len(records))
    return audit


def _reset_workspaces(succeeded: dict[str, list[Operation]], unlisted: list[Operation]) -> set[int]:
    """The workspaces whose succeeded operations of the window the listing (nearly) all lacks.
    Judged per workspace: another tenant's few lost records stay findings of their own, each named."""
    totals = Counter(op.workspace_id for operations in succeeded.values() for op in operations)
    lost = Counter(op.workspace_id for op in unlisted)
    return {
        workspace_id
        for workspace_id, total in totals.items()
        if total >= RESET_MIN_OPERATIONS and lost[workspace_id] >= RESET_SHARE * total
    }


def _succeeded(action: ActionDefinition, *, since: datetime, until: datetime) -> list[Operation]:
    return list(
        Operation.objects.filter(
            action=action.name,
            state=State.SUCCEEDED,
            updated_at__gte=since,
            updated_at__lt=until,
        ).order_by("id")
    )


def audit_action(
    action: ActionDefinition,
    records: list[dict],
    succeeded: list[Operation],
    *,
    since: datetime,
    until: datetime,
    into: ActionAudit,
    reset: Collection[int] = (),
) -> None:
    """Compare one action's succeeded operations in [since, until) with the destination's records.
    An operation in no record of a workspace in ``reset`` (``_reset_workspaces``) is left to that
    workspace's one finding."""
    ours: dict[str, list[dict]] = {}
    for record in records:
        reference = action.our_reference(record)
        if reference and reference.endswith(f":{action.name}"):
            ours.setdefault(reference, []).append(record)
    into.operations_checked += len(succeeded)
    destination = action.destination_name()
    for operation in succeeded:
        if operation.workspace_id in reset and operation.key not in ours:
            continue
        into.findings += _check_operation(action, operation, ours.get(operation.key, []))
    into.findings += _unknown_to_ledger(action, ours, since=since, until=until)
    for finding in into.findings:
        finding.destination = finding.destination or destination


def _reset_findings(
    actions: list[ActionDefinition],
    unlisted: list[Operation],
    succeeded: dict[str, list[Operation]],
    *,
    records_listed: int,
) -> list[Finding]:
    """One ``destination_reset`` per workspace whose operations the listing lacks."""
    destination = actions[0].destination_name()
    findings = []
    for workspace_id in sorted({op.workspace_id for op in unlisted}):
        findings.append(
            Finding(
                workspace_id,
                "",
                Mismatch.Kind.DESTINATION_RESET,
                destination,
                destination=destination,
                evidence={
                    "unlisted": sum(1 for op in unlisted if op.workspace_id == workspace_id),
                    "succeeded": sum(1 for ops in succeeded.values() for op in ops if op.workspace_id == workspace_id),
                    "records_listed": records_listed,
                    "actions": sorted({op.action for op in unlisted if op.workspace_id == workspace_id}),
                },
            )
        )
    return findings


def _check_operation(action, operation: Operation, records: list[dict]) -> list[Finding]:
    if not records:
        answer = action.lookup(operation)  # perhaps created before the window: ask for it by key
        if isinstance(answer, CannotTell):
            raise DestinationUnclear(f"{action.name} cannot tell whether it holds {operation.key}: {answer.reason}")
        if not isinstance(answer, Absent):
            return []
        return [
            Finding(
                operation.workspace_id,
                action.name,
                Mismatch.Kind.MISSING_AT_DESTINATION,
                operation.key,
                operation=operation,
                evidence={"external_id": operation.external_id},
            )
        ]
    record = next((r for r in records if r["id"] == operation.external_id), records[0])
    fields = _differing_fields(action, operation, record)
    if not fields:
        return []
    return [
        Finding(
            operation.workspace_id,
            action.name,
            Mismatch.Kind.CONTENT_DIFFERS,
            operation.key,
            record_id=record["id"],
            operation=operation,
            evidence={"record_id": record["id"], "fields": fields},
        )
    ]


def _differing_fields(action, operation: Operation, record: dict) -> list[str]:
    """The names of the fields the record holds otherwise than the operation (never the values)."""
    if operation.redacted_at is not None:
        return []  # retention redacted the payload: nothing left to compare with
    expected, held = action.record_payload(operation), record.get("payload")
    if not isinstance(held, dict):
        return ["payload"]
    missing = object()
    fields = sorted(
        name for name in expected.keys() | held.keys() if expected.get(name, missing) != held.get(name, missing)
    )
    if record.get("reference") != operation.key:
        fields.append("reference")
    return fields


def _unknown_to_ledger(action, ours: dict[str, list[dict]], *, since, until) -> list[Finding]:
    judged = {
        reference: [r for r in records if since <= datetime.fromisoformat(r["created_at"]) < until]
        for reference, records in ours.items()
    }
    judged = {reference: records for reference, records in judged.items() if records}
    operations = _operations(action, list(judged))
    slugs = {unquote(reference.split(":", 1)[0]) for reference in judged}
    workspaces = dict(Workspace.objects.filter(slug__in=slugs).values_list("slug", "pk"))
    findings = []
    for reference, records in judged.items():
        operation = operations.get(reference)
        workspace_id = operation.workspace_id if operation else workspaces.get(unquote(reference.split(":", 1)[0]))
        if workspace_id is None or (operation and operation.state in SETTLING):
            continue  # not one of our workspaces' keys, or its outcome is on its way
        for record in records:
            if operation and operation.state == State.SUCCEEDED and record["id"] == operation.external_id:
                continue
            evidence = {"record_id": record["id"], "operation_state": operation.state if operation else ""}
            if operation and operation.state == State.SUCCEEDED:
                evidence["external_id"] = operation.external_id  # a second record of a succeeded operation
            findings.append(
                Finding(
                    workspace_id,
                    action.name,
                    Mismatch.Kind.UNKNOWN_TO_LEDGER,
                    reference,
                    record_id=record["id"],
                    operation=operation,
                    evidence=evidence,
                )
            )
    return findings


def _operations(action, keys: list[str]) -> dict[str, Operation]:
    found = {}
    for start in range(0, len(keys), _CHUNK):
        for operation in Operation.objects.filter(action=action.name, key__in=keys[start : start + _CHUNK]):
            found[operation.key] = operation
    return found


def _record(run: ReconciliationRun, findings: list[Finding]) -> int:
    """Writes the findings not already open; returns how many. Runs in the caller's transaction."""
    references = {finding.reference for finding in findings}
    already_open = set()
    keys = sorted(references)
    for start in range(0, len(keys), _CHUNK):
        already_open |= set(
            Mismatch.objects.filter(
                status=Mismatch.Status.OPEN,
                reference__in=keys[start : start + _CHUNK],
            ).values_list("workspace_id", "action", "kind", "reference", "record_id")
        )
    new = [finding for finding in findings if finding.identity not in already_open]
    # ignore_conflicts: a concurrent run that recorded the same finding first keeps its row.
    Mismatch.objects.bulk_create(
        [
            Mismatch(
                run=run,
                workspace_id=f.workspace_id,
                operation=f.operation,
                action=f.action,
                kind=f.kind,
                reference=f.reference,
                record_id=f.record_id,
                destination=f.destination,
                evidence=f.evidence,
            )
            for f in new
        ],
        ignore_conflicts=True,
    )
    record_audit_events(
        [
            audit_event(
                actor=ACTOR,
                kind="mismatch_found",
                operation=finding.operation,
                workspace=None if finding.operation else Workspace(pk=finding.workspace_id),
                message=f"{finding.kind} at {finding.action or finding.destination}'s destination: "
                f"{_describe(finding)} (audit run {run.pk})",
            )
            for finding in new
        ]
    )
    return len(new)


def _describe(finding: Finding) -> str:
    evidence = finding.evidence
    if finding.kind == Mismatch.Kind.DESTINATION_RESET:
        return f"{reset_summary(evidence)}: was it reset?"
    if finding.kind == Mismatch.Kind.MISSING_AT_DESTINATION:
        return f"no record carries {finding.reference}"
    if finding.kind == Mismatch.Kind.CONTENT_DIFFERS:
        return f"record {evidence['record_id']} differs in {', '.join(evidence['fields'])}"
    if evidence.get("external_id"):
        return f"record {evidence['record_id']} is a second record of {finding.reference}"
    state = evidence.get("operation_state")
    return f"record {evidence['record_id']} carries {finding.reference}, " + (
        f"whose operation is {state}" if state else "which no operation has"
    )


def _finish(run: ReconciliationRun, *, status: str, error: str = "") -> None:
    run.finished_at = timezone.now()
    run.duration = run.finished_at - run.started_at
    run.status, run.error = status, error[:500]
    run.save()
