"""What the reconciliation audit found: one ReconciliationRun per audit, one Mismatch per finding.

A mismatch names its operation when there is one, without keeping it from the retention purge
(``SET_NULL``: the purge detaches it, ``ledger.retention.referring_relations``). Its evidence holds
record ids and field names, never values: a differing field may be sensitive.
"""

from django.db import models
from django.db.models import Q

from ledger.models import Operation, Workspace
from ledger.models.checks import choices_check


class RunStatus(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class MismatchKind(models.TextChoices):
    MISSING_AT_DESTINATION = "missing_at_destination", "Missing at destination"
    UNKNOWN_TO_LEDGER = "unknown_to_ledger", "Unknown to ledger"
    CONTENT_DIFFERS = "content_differs", "Content differs"
    # One finding for a destination whose listing lost (nearly) every record of the window: a reset,
    # not hundreds of missing records (reconciliation.two_way_audit, RESET_*).
    DESTINATION_RESET = "destination_reset", "Destination reset?"


class MismatchStatus(models.TextChoices):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    ADOPTED = "adopted"
    REPLAYED = "replayed"


class ReconciliationRun(models.Model):
    Status = RunStatus

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    duration = models.DurationField(null=True, blank=True)
    # The window: operations that succeeded, and records created, in [since, until).
    since = models.DateTimeField()
    until = models.DateTimeField()
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    error = models.CharField(max_length=500, blank=True)
    records_seen = models.PositiveIntegerField(default=0)
    operations_checked = models.PositiveIntegerField(default=0)
    missing_at_destination = models.PositiveIntegerField(default=0)
    unknown_to_ledger = models.PositiveIntegerField(default=0)
    content_differs = models.PositiveIntegerField(default=0)
    destination_reset = models.PositiveIntegerField(default=0)
    # Findings not already open from an earlier run (those are counted above, not recorded again).
    new_mismatches = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=choices_check("status", RunStatus.choices), name="reconciliation_run_status_valid"
            ),
        ]
        indexes = [models.Index(fields=["status", "-until"], name="reconciliation_run_until_idx")]

    def __str__(self):
        return f"audit {self.pk} {self.since:%Y-%m-%d %H:%M} – {self.until:%Y-%m-%d %H:%M} ({self.status})"


class Mismatch(models.Model):
    Kind = MismatchKind
    Status = MismatchStatus

    run = models.ForeignKey(ReconciliationRun, on_delete=models.PROTECT, related_name="mismatches")
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    operation = models.ForeignKey(Operation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    action = models.CharField(max_length=100)  # blank for a destination_reset, which spans its actions
    # The system the action calls (``ActionDefinition.destination_name``), as the audit listed it.
    destination = models.CharField(max_length=200, blank=True)
    # Our reference: the operation key the record carries (as idempotency key or reference).
    reference = models.TextField()
    record_id = models.CharField(max_length=200, blank=True)  # none when the record is missing
    kind = models.CharField(max_length=30, choices=MismatchKind.choices)
    evidence = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=MismatchStatus.choices, default=MismatchStatus.OPEN)
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "mismatches"
        constraints = [
            models.CheckConstraint(condition=choices_check("kind", MismatchKind.choices), name="mismatch_kind_valid"),
            models.CheckConstraint(
                condition=choices_check("status", MismatchStatus.choices), name="mismatch_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(status="open", decided_at__isnull=True, decided_by="")
                | (~Q(status="open") & Q(decided_at__isnull=False) & ~Q(decided_by="")),
                name="mismatch_decided_has_who_and_when",
            ),
            # The same finding is recorded once while it is open, however many runs see it.
            models.UniqueConstraint(
                fields=["workspace", "action", "kind", "reference", "record_id"],
                condition=Q(status="open"),
                name="mismatch_open_once",
            ),
        ]
        indexes = [models.Index(fields=["status", "-created_at", "-id"], name="mismatch_open_page_idx")]

    def __str__(self):
        return f"{self.kind} {self.reference} ({self.status})"

    @property
    def reset_words(self) -> str:
        """A destination_reset's numbers in words (blank for another kind)."""
        return reset_summary(self.evidence) if self.kind == MismatchKind.DESTINATION_RESET else ""


def reset_summary(evidence: dict) -> str:
    """What a destination_reset's evidence counts, in words."""
    unlisted, succeeded = evidence["unlisted"], evidence["succeeded"]
    listed = "none" if unlisted == succeeded else f"only {succeeded - unlisted:,}"
    return f"the destination lists {listed} of the {succeeded:,} records the ledger holds for this window"
